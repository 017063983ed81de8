/* k_version.c — the kernel library's version string; also keeps the archive non-empty. */
const char *k_version(void) { return "kiln-kernels 0.1"; }
