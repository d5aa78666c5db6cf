// Host stand-in for CANN's tiling-data macros: the TilingData becomes a plain struct.
#ifndef MS_ROTARY_HOST_SHIM_TILINGDATA_BASE_H_
#define MS_ROTARY_HOST_SHIM_TILINGDATA_BASE_H_
#include <cstdint>
#define BEGIN_TILING_DATA_DEF(name) struct name {
#define TILING_DATA_FIELD_DEF(type, field) type field
#define END_TILING_DATA_DEF }
#define REGISTER_TILING_DATA_CLASS(op, data)
#endif
