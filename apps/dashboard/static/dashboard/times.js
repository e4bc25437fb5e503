// Every page: the server's <time> elements in the reader's zone (or UTC), and the top bar's toggle
// between the two (when.js).

import { localiseTimes, startZoneToggle } from "./when.js";

startZoneToggle();
localiseTimes();
