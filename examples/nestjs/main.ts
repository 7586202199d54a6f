import { createApp, type Platform } from './app.js';

const platform = (process.env['PLATFORM'] ?? 'express') as Platform;
const port = Number(process.env['PORT'] ?? 3000);
const app = await createApp(platform);
app.enableShutdownHooks();
await app.listen(port, '127.0.0.1');
console.log(`payments API (NestJS on ${platform}) on http://127.0.0.1:${port}`);
