/* main.c: the profiler_demo executable; everything else is in pd_cli_demo. */
#include "demo.h"

int main(int argc, char *argv[]) { return pd_demo_main(argc, argv); }
