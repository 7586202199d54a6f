import { createMemorySessionStore } from '../../src/client/sessions.js';
import { sessionSuite } from './session-suite.js';

sessionSuite('the memory store', createMemorySessionStore);
