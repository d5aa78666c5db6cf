// OpDef, infer-shape and tiling of MsRotaryPartialRotaryMul and MsRotaryPartialRotaryMulGrad, and of their twins
// that gather cos/sin rows by position (...Positions, ...PositionsGrad: cos/sin a cache [1, P, 1, L], inputs
// positions int64 [channels, 1|B, S] and lane_masks int16 [channels, L * cos bytes / 2], which lanes each
// channel gives; ...PositionsQK(Grad): q and k in one launch, both inputs and outputs), for CANN's custom op
// compiler (built by kernel/ascend/build.sh; needs CANN).
// dy is both input and output: the op writes the rotated slice back into it. The tiling arithmetic lives in
// rotary_tiling.cpp, tested on the host.
#include <cstdio>
#include <cstring>
#include <vector>

#include "ms_rotary_partial_rotary_mul_tiling.h"
#include "register/op_def_registry.h"
#include "rotary_tiling.h"
#include "tiling/platform/platform_ascendc.h"

namespace ms_rotary_ascend {

// The inputs of each op family, in the OpDef's order: DefineRotaryOp declares them from this list and the
// tiling finds each by name in it, so the two cannot disagree. gathers: positions and lane_masks after sin;
// with_k: q and k instead of dy.
std::vector<const char *> InputNames(bool gathers, bool with_k) {
  std::vector<const char *> names;
  if (with_k) {
    names = {"q", "k"};
  } else {
    names = {"dy"};
  }
  names.insert(names.end(), {"cos", "sin"});
  if (gathers) names.insert(names.end(), {"positions", "lane_masks"});
  return names;
}

size_t InputIndex(const std::vector<const char *> &names, const char *name) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (std::strcmp(names[i], name) == 0) return i;
  }
  return names.size();  // no such input: GetInputShape returns null for it
}

}  // namespace ms_rotary_ascend

namespace optiling {
namespace {

int64_t dtype_id(ge::DataType dtype) {
  return dtype == ge::DT_FLOAT ? ms_rotary::kFloat32 : dtype == ge::DT_FLOAT16 ? ms_rotary::kFloat16
                                                                              : ms_rotary::kBFloat16;
}

// A refused tiling says why, as CANN's OP_LOGE does (the op's node name, then the reason), on the host's stderr,
// which CANN's log collects; then the graph fails to build.
#define MS_ROTARY_TILING_CHECK(context, condition, ...)                                                  \
  do {                                                                                                    \
    if (!(condition)) {                                                                                   \
      std::fprintf(stderr, "[ERROR] ms_rotary tiling [%s]: ", (context)->GetNodeName() != nullptr        \
                                                                  ? (context)->GetNodeName() : "?");     \
      std::fprintf(stderr, __VA_ARGS__);                                                                  \
      std::fprintf(stderr, "\n");                                                                         \
      return ge::GRAPH_FAILED;                                                                            \
    }                                                                                                     \
  } while (0)

// The storage shape of input `name`, or null for an absent one.
const gert::Shape *InputShape(gert::TilingContext *context, const std::vector<const char *> &names,
                              const char *name) {
  const gert::StorageShape *shape = context->GetInputShape(ms_rotary_ascend::InputIndex(names, name));
  return shape == nullptr ? nullptr : &shape->GetStorageShape();
}

const gert::CompileTimeTensorDesc *InputDesc(gert::TilingContext *context, const std::vector<const char *> &names,
                                             const char *name) {
  return context->GetInputDesc(ms_rotary_ascend::InputIndex(names, name));
}

// gathers: the ops with positions and lane_masks after sin; with_k: the q+k ops.
ge::graphStatus TilingCommon(gert::TilingContext *context, bool conjugate, bool gathers, bool with_k = false) {
  const std::vector<const char *> names = ms_rotary_ascend::InputNames(gathers, with_k);
  const char *rotated = with_k ? "q" : "dy";
  const gert::Shape *dy = InputShape(context, names, rotated);
  const gert::Shape *cos = InputShape(context, names, "cos");
  const gert::Shape *sin = InputShape(context, names, "sin");
  const auto *dy_desc = InputDesc(context, names, rotated);
  const auto *cos_desc = InputDesc(context, names, "cos");
  const auto *sin_desc = InputDesc(context, names, "sin");
  MS_ROTARY_TILING_CHECK(context, dy && cos && sin && dy_desc && cos_desc && sin_desc, "an input shape or desc is missing");
  MS_ROTARY_TILING_CHECK(context, dy->GetDimNum() == 4 && cos->GetDimNum() == 4 && sin->GetDimNum() == 4,
                         "%s, cos and sin must be 4-D, got %zu, %zu and %zu dims", rotated, dy->GetDimNum(),
                         cos->GetDimNum(), sin->GetDimNum());
  const auto *attrs = context->GetAttrs();
  MS_ROTARY_TILING_CHECK(context, attrs != nullptr, "the op has no attributes");
  const int64_t *mode = attrs->GetAttrPointer<int64_t>(0);
  const auto *slice = attrs->GetAttrPointer<gert::ContinuousVector>(1);
  MS_ROTARY_TILING_CHECK(context, mode != nullptr && slice != nullptr && slice->GetSize() == 2,
                         "attributes rotary_mode and partial_slice (two values) are required");
  const int64_t *bounds = static_cast<const int64_t *>(slice->GetData());
  ms_rotary_ascend::RotaryShape shape{};
  for (size_t i = 0; i < 4; ++i) {
    shape.dy[i] = dy->GetDim(i);
    shape.cos[i] = cos->GetDim(i);
    MS_ROTARY_TILING_CHECK(context, sin->GetDim(i) == cos->GetDim(i), "cos and sin differ in shape at axis %zu", i);
  }
  const ge::DataType dy_type = dy_desc->GetDataType();
  const ge::DataType cos_type = cos_desc->GetDataType();
  MS_ROTARY_TILING_CHECK(context, sin_desc->GetDataType() == cos_type, "cos and sin differ in dtype");
  shape.dy_dtype_id = dtype_id(dy_type);
  shape.cos_dtype_id = dtype_id(cos_type);
  shape.rotary_mode = *mode;
  shape.start = bounds[0];
  shape.end = ms_rotary::slice_end(bounds[0], bounds[1], shape.cos);
  shape.conjugate = conjugate;
  shape.gathers = gathers;
  if (gathers) {  // positions [channels, 1|B, S], lane masks; attribute 2: dy's (B, S) axes
    const gert::Shape *positions = InputShape(context, names, "positions");
    const gert::Shape *masks = InputShape(context, names, "lane_masks");
    const auto *axes = attrs->GetAttrPointer<gert::ContinuousVector>(2);
    MS_ROTARY_TILING_CHECK(context, positions && masks && axes, "positions, lane_masks or positions_axes missing");
    MS_ROTARY_TILING_CHECK(context, positions->GetDimNum() == 3 && axes->GetSize() == 2,
                           "positions must be [channels, 1|B, S] and positions_axes two values");
    const int64_t *axis = static_cast<const int64_t *>(axes->GetData());
    shape.positions.channels = positions->GetDim(0);
    shape.positions.batch = positions->GetDim(1);
    shape.positions.seq = positions->GetDim(2);
    shape.positions.batch_axis = axis[0], shape.positions.seq_axis = axis[1];
    const int64_t mask_bytes = (shape.end - shape.start) * ms_rotary::dtype_bytes(shape.cos_dtype_id);
    MS_ROTARY_TILING_CHECK(context, masks->GetDimNum() == 2 && masks->GetDim(0) == positions->GetDim(0) &&
                                        masks->GetDim(1) * 2 == mask_bytes,  // the kernel reads it all
                           "lane_masks must be [channels, L * cos bytes / 2]");
  }
  if (with_k) {  // k: q's shape but for its heads axis (the one neither positions axis names)
    const gert::Shape *k = InputShape(context, names, "k");
    const auto *k_desc = InputDesc(context, names, "k");
    const int64_t heads_axis = 3 - shape.positions.batch_axis - shape.positions.seq_axis;
    MS_ROTARY_TILING_CHECK(context, k && k_desc && k->GetDimNum() == 4 && heads_axis >= 0 && heads_axis <= 2,
                           "k must be 4-D beside q's layout");
    for (size_t i = 0; i < 4; ++i) {
      MS_ROTARY_TILING_CHECK(context, static_cast<int64_t>(i) == heads_axis || k->GetDim(i) == dy->GetDim(i),
                             "k differs from q at axis %zu", i);
    }
    MS_ROTARY_TILING_CHECK(context, k_desc->GetDataType() == dy_type, "q and k differ in dtype");
    shape.k_heads = k->GetDim(heads_axis);
  }

  auto platform = platform_ascendc::PlatformAscendC(context->GetPlatformInfo());
  shape.arch35 = platform.GetSocVersion() == platform_ascendc::SocVersion::ASCEND950;
  uint64_t ub_bytes = 0;
  platform.GetCoreMemSize(platform_ascendc::CoreMemType::UB, ub_bytes);
  ms_rotary_ascend::RotaryTiling t{};
  const ms_rotary::Status status =
      ms_rotary_ascend::compute_rotary_tiling(shape, platform.GetCoreNumAiv(), static_cast<int64_t>(ub_bytes), &t);
  MS_ROTARY_TILING_CHECK(context, status == ms_rotary::kOk, "%s", ms_rotary::status_message(status));
  PartialRotaryTilingData data;
#define MS_ROTARY_SET_FIELD(tiling_field, data_field) data.set_##data_field(t.tiling_field);
  MS_ROTARY_TILING_FIELDS(MS_ROTARY_SET_FIELD)
#undef MS_ROTARY_SET_FIELD
  data.SaveToBuffer(context->GetRawTilingData()->GetData(), context->GetRawTilingData()->GetCapacity());
  context->GetRawTilingData()->SetDataSize(data.GetDataSize());
  context->SetTilingKey(static_cast<uint64_t>(t.tiling_key));
  context->SetBlockDim(t.used_cores > 0 ? static_cast<uint32_t>(t.used_cores) : 1);
  size_t *workspace = context->GetWorkspaceSizes(1);
  workspace[0] = platform.GetLibApiWorkSpaceSize();
  return ge::GRAPH_SUCCESS;
}

ge::graphStatus TilingForward(gert::TilingContext *context) { return TilingCommon(context, false, false); }
ge::graphStatus TilingBackward(gert::TilingContext *context) { return TilingCommon(context, true, false); }
ge::graphStatus TilingPositions(gert::TilingContext *context) { return TilingCommon(context, false, true); }
ge::graphStatus TilingPositionsGrad(gert::TilingContext *context) { return TilingCommon(context, true, true); }
ge::graphStatus TilingPositionsQK(gert::TilingContext *context) {
  return TilingCommon(context, false, true, true);
}
ge::graphStatus TilingPositionsQKGrad(gert::TilingContext *context) {
  return TilingCommon(context, true, true, true);
}

}  // namespace
}  // namespace optiling

namespace ge {
namespace {

// Output 0 is dy itself: same shape and dtype.
graphStatus InferShape(gert::InferShapeContext *context) {
  *context->GetOutputShape(0) = *context->GetInputShape(0);
  return GRAPH_SUCCESS;
}

graphStatus InferDataType(gert::InferDataTypeContext *context) {
  context->SetOutputDataType(0, context->GetInputDataType(0));
  return GRAPH_SUCCESS;
}

// The q+k ops: outputs 0 and 1 are q and k themselves.
graphStatus InferShapeQK(gert::InferShapeContext *context) {
  *context->GetOutputShape(0) = *context->GetInputShape(0);
  *context->GetOutputShape(1) = *context->GetInputShape(1);
  return GRAPH_SUCCESS;
}

graphStatus InferDataTypeQK(gert::InferDataTypeContext *context) {
  context->SetOutputDataType(0, context->GetInputDataType(0));
  context->SetOutputDataType(1, context->GetInputDataType(1));
  return GRAPH_SUCCESS;
}

}  // namespace
}  // namespace ge

namespace ops {

// Every dy dtype with every cos/sin dtype: 9 combinations per input, listed dy-major.
#define MS_ROTARY_DY_TYPES                                                                           \
  {ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_FLOAT16, ge::DT_BF16, \
   ge::DT_BF16, ge::DT_BF16}
#define MS_ROTARY_COS_TYPES                                                                            \
  {ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_BF16, ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_BF16, ge::DT_FLOAT, \
   ge::DT_FLOAT16, ge::DT_BF16}
#define MS_ROTARY_POSITIONS_TYPES                                                                    \
  {ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64, ge::DT_INT64,    \
   ge::DT_INT64, ge::DT_INT64}
#define MS_ROTARY_LANE_MASK_TYPES                                                                    \
  {ge::DT_INT16, ge::DT_INT16, ge::DT_INT16, ge::DT_INT16, ge::DT_INT16, ge::DT_INT16, ge::DT_INT16,    \
   ge::DT_INT16, ge::DT_INT16}
#define MS_ROTARY_FORMATS {ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, \
                           ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND, ge::FORMAT_ND}

// The tiling function's type is not named: CANN 8 calls it gert::OpImplRegisterV2::TilingKernelFunc, the
// public metadef (2023) gert::OpImplKernelRegistry::TilingKernelFunc; SetTiling takes it either way.
// gathers: the inputs positions and lane_masks, and the attribute positions_axes, after the others; with_k:
// inputs and outputs q and k instead of dy.
template <typename Self, typename TilingFunction>
void DefineRotaryOp(Self &op, TilingFunction tiling, bool gathers = false, bool with_k = false) {
  for (const char *name : ms_rotary_ascend::InputNames(gathers, with_k)) {
    const bool table = std::strcmp(name, "cos") == 0 || std::strcmp(name, "sin") == 0;
    const bool positions = std::strcmp(name, "positions") == 0, masks = std::strcmp(name, "lane_masks") == 0;
    op.Input(name).ParamType(REQUIRED)
        .DataType(positions ? std::vector<ge::DataType>(MS_ROTARY_POSITIONS_TYPES)
                  : masks   ? std::vector<ge::DataType>(MS_ROTARY_LANE_MASK_TYPES)
                  : table   ? std::vector<ge::DataType>(MS_ROTARY_COS_TYPES)
                            : std::vector<ge::DataType>(MS_ROTARY_DY_TYPES))
        .Format(MS_ROTARY_FORMATS);
  }
  if (with_k) {
    op.Output("q").ParamType(REQUIRED).DataType(MS_ROTARY_DY_TYPES).Format(MS_ROTARY_FORMATS);
    op.Output("k").ParamType(REQUIRED).DataType(MS_ROTARY_DY_TYPES).Format(MS_ROTARY_FORMATS);
    op.SetInferShape(ge::InferShapeQK).SetInferDataType(ge::InferDataTypeQK);
  } else {
    op.Output("dy").ParamType(REQUIRED).DataType(MS_ROTARY_DY_TYPES).Format(MS_ROTARY_FORMATS);
    op.SetInferShape(ge::InferShape).SetInferDataType(ge::InferDataType);
  }
  op.Attr("rotary_mode").Int(1);
  op.Attr("partial_slice").ListInt({0, ms_rotary::kSliceFromCosEnd});
  if (gathers) op.Attr("positions_axes").ListInt({0, 1});
  op.AICore().SetTiling(tiling).AddConfig("ascend910b").AddConfig("ascend910_93").AddConfig("ascend950");
}

class MsRotaryPartialRotaryMul : public OpDef {
 public:
  explicit MsRotaryPartialRotaryMul(const char *name) : OpDef(name) {
    DefineRotaryOp(*this, optiling::TilingForward);
  }
};

class MsRotaryPartialRotaryMulGrad : public OpDef {
 public:
  explicit MsRotaryPartialRotaryMulGrad(const char *name) : OpDef(name) {
    DefineRotaryOp(*this, optiling::TilingBackward);
  }
};

class MsRotaryPartialRotaryMulPositions : public OpDef {
 public:
  explicit MsRotaryPartialRotaryMulPositions(const char *name) : OpDef(name) {
    DefineRotaryOp(*this, optiling::TilingPositions, true);
  }
};

class MsRotaryPartialRotaryMulPositionsGrad : public OpDef {
 public:
  explicit MsRotaryPartialRotaryMulPositionsGrad(const char *name) : OpDef(name) {
    DefineRotaryOp(*this, optiling::TilingPositionsGrad, true);
  }
};

class MsRotaryPartialRotaryMulPositionsQK : public OpDef {
 public:
  explicit MsRotaryPartialRotaryMulPositionsQK(const char *name) : OpDef(name) {
    DefineRotaryOp(*this, optiling::TilingPositionsQK, true, true);
  }
};

class MsRotaryPartialRotaryMulPositionsQKGrad : public OpDef {
 public:
  explicit MsRotaryPartialRotaryMulPositionsQKGrad(const char *name) : OpDef(name) {
    DefineRotaryOp(*this, optiling::TilingPositionsQKGrad, true, true);
  }
};

OP_ADD(MsRotaryPartialRotaryMul);
OP_ADD(MsRotaryPartialRotaryMulGrad);
OP_ADD(MsRotaryPartialRotaryMulPositions);
OP_ADD(MsRotaryPartialRotaryMulPositionsGrad);
OP_ADD(MsRotaryPartialRotaryMulPositionsQK);
OP_ADD(MsRotaryPartialRotaryMulPositionsQKGrad);

}  // namespace ops
