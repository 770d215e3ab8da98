/* dot_module.c - the export of the Graphviz module (libdfg-dot.so, dfg_dot.h). */
#include "dfg_dot.h"

static const dfg_dot_api api = {.write_dot = dfg_write_dot, .write_svg = dfg_write_svg, .plot_svg = dfg_plot_svg};

__attribute__((visibility("default"))) const dfg_dot_api *dfg_dot_module(int abi);
const dfg_dot_api *dfg_dot_module(int abi) { return abi == DFG_DOT_ABI ? &api : NULL; }
