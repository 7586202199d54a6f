import { createMemorySessionStore } from '../../src/sessions/index.js';
import { sessionSuite } from './contract.js';

sessionSuite('the memory store', createMemorySessionStore);
