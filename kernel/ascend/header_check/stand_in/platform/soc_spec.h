// Stand-in for platform/soc_spec.h, which asc-devkit's platform_ascendc.h includes and the public metadef
// (github.com/Ascend/metadef, last 2023-12) does not carry yet: what platform_ascendc.h uses from it.
#pragma once
#include <csignal>
namespace fe {
class PlatFormInfos;
}  // namespace fe
