// Stand-in for the closed tikicpulib header of this name: what the headers use from it is declared
// in stub_def.h.
#pragma once
#include "stub_def.h"
