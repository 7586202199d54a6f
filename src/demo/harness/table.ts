/**
 * The demos' report layout: one labelled value per line, the values aligned in one column.
 *
 * @module
 */

/** One line of a report: its label and its value. */
export type ReportRow = readonly [label: string, value: string | number];

/** The rows as indented, aligned lines (no trailing newline). */
export function formatRows(rows: readonly ReportRow[]): string[] {
  const width = Math.max(...rows.map(([label]) => label.length));
  return rows.map(([label, value]) => `  ${label.padEnd(width)}  ${value}`);
}
