/* rt_version.c — the runtime's version string; also keeps the archive non-empty. */
const char *rt_version(void) { return "kiln-runtime 0.1"; }
