/* pd_run: profiles any CUDA program through libpd_inject.so (run.h). */
#include "run.h"

int main(int argc, char *argv[]) { return pd_run_main(argc, argv); }
