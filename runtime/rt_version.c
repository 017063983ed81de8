/* rt_version.c — Kiln's version (CMake's project version, KILN_VERSION); also keeps the
 * archive non-empty. */
#ifndef KILN_VERSION
#define KILN_VERSION "unknown"
#endif
const char *rt_version(void) { return KILN_VERSION; }
