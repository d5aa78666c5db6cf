// OpDef, infer-shape and tiling of MsRotaryPartialRotaryMul and MsRotaryPartialRotaryMulGrad, and of their twins
// that gather cos/sin rows by position (...Positions, ...PositionsGrad: cos/sin a cache [1, P, 1, L], inputs
// positions int64 [channels, 1|B, S] and lane_masks int16 [channels, L * cos bytes / 2], which lanes each
// channel gives; ...PositionsQK(Grad): q and k in one launch, both inputs and outputs), for CANN's custom op
// compiler (built by kernel/ascend/build.sh; needs CANN).
// dy is both input and output: the op writes the rotated slice back into it. The tiling arithmetic lives in
// rotary_tiling.cpp, tested on the host.
#include <cstring>

#include "ms_rotary_partial_rotary_mul_tiling.h"
#include "register/op_def_registry.h"
#include "rotary_tiling.h"
#include "tiling/platform/platform_ascendc.h"

namespace optiling {
namespace {

int64_t dtype_id(ge::DataType dtype) {
  return dtype == ge::DT_FLOAT ? ms_rotary::kFloat32 : dtype == ge::DT_FLOAT16 ? ms_rotary::kFloat16
                                                                              : ms_rotary::kBFloat16;
}

// gathers: the ops with positions and lane_masks after sin; with_k: the q+k ops, whose input 1 is k.
ge::graphStatus TilingCommon(gert::TilingContext *context, bool conjugate, bool gathers, bool with_k = false) {
  const size_t table = with_k ? 2 : 1;  // cos's input index; sin, positions, lane_masks follow it
  const gert::Shape dy = context->GetInputShape(0)->GetStorageShape();
  const gert::Shape cos = context->GetInputShape(table)->GetStorageShape();
  const gert::Shape sin = context->GetInputShape(table + 1)->GetStorageShape();
  if (dy.GetDimNum() != 4 || cos.GetDimNum() != 4 || sin.GetDimNum() != 4) return ge::GRAPH_FAILED;
  const auto *attrs = context->GetAttrs();
  const int64_t mode = *attrs->GetAttrPointer<int64_t>(0);
  const auto *slice = attrs->GetAttrPointer<gert::ContinuousVector>(1);
  const int64_t *bounds = static_cast<const int64_t *>(slice->GetData());
  ms_rotary_ascend::RotaryShape shape{};
  for (size_t i = 0; i < 4; ++i) {
    shape.dy[i] = dy.GetDim(i);
    shape.cos[i] = cos.GetDim(i);
    if (sin.GetDim(i) != cos.GetDim(i)) return ge::GRAPH_FAILED;
  }
  const ge::DataType dy_type = context->GetInputDesc(0)->GetDataType();
  const ge::DataType cos_type = context->GetInputDesc(table)->GetDataType();
  if (context->GetInputDesc(table + 1)->GetDataType() != cos_type) return ge::GRAPH_FAILED;
  shape.dy_dtype_id = dtype_id(dy_type);
  shape.cos_dtype_id = dtype_id(cos_type);
  shape.rotary_mode = mode;
  if (slice->GetSize() != 2) return ge::GRAPH_FAILED;
  shape.start = bounds[0];
  shape.end = ms_rotary::slice_end(bounds[0], bounds[1], shape.cos);
  shape.conjugate = conjugate;
  shape.gathers = gathers;
  if (gathers) {  // positions [channels, 1|B, S], lane masks; attribute 2: dy's (B, S) axes
    const gert::Shape positions = context->GetInputShape(table + 2)->GetStorageShape();
    const auto *axes = attrs->GetAttrPointer<gert::ContinuousVector>(2);
    if (positions.GetDimNum() != 3 || axes->GetSize() != 2) return ge::GRAPH_FAILED;
    const int64_t *axis = static_cast<const int64_t *>(axes->GetData());
    shape.positions.channels = positions.GetDim(0);
    shape.positions.batch = positions.GetDim(1);
    shape.positions.seq = positions.GetDim(2);
    shape.positions.batch_axis = axis[0], shape.positions.seq_axis = axis[1];
    const gert::Shape masks = context->GetInputShape(table + 3)->GetStorageShape();  // the kernel reads it all
    const int64_t mask_bytes = (shape.end - shape.start) * ms_rotary::dtype_bytes(shape.cos_dtype_id);
    if (masks.GetDimNum() != 2 || masks.GetDim(0) != positions.GetDim(0) || masks.GetDim(1) * 2 != mask_bytes) {
      return ge::GRAPH_FAILED;
    }
  }
  if (with_k) {  // k: q's shape but for its heads axis (the one neither positions axis names)
    const gert::Shape k = context->GetInputShape(1)->GetStorageShape();
    const int64_t heads_axis = 3 - shape.positions.batch_axis - shape.positions.seq_axis;
    if (k.GetDimNum() != 4 || heads_axis < 0 || heads_axis > 2) return ge::GRAPH_FAILED;
    for (size_t i = 0; i < 4; ++i) {
      if (static_cast<int64_t>(i) != heads_axis && k.GetDim(i) != dy.GetDim(i)) return ge::GRAPH_FAILED;
    }
    if (context->GetInputDesc(1)->GetDataType() != dy_type) return ge::GRAPH_FAILED;
    shape.k_heads = k.GetDim(heads_axis);
  }

  auto platform = platform_ascendc::PlatformAscendC(context->GetPlatformInfo());
  shape.arch35 = platform.GetSocVersion() == platform_ascendc::SocVersion::ASCEND950;
  uint64_t ub_bytes = 0;
  platform.GetCoreMemSize(platform_ascendc::CoreMemType::UB, ub_bytes);
  ms_rotary_ascend::RotaryTiling t{};
  if (ms_rotary_ascend::compute_rotary_tiling(shape, platform.GetCoreNumAiv(), static_cast<int64_t>(ub_bytes), &t) !=
      ms_rotary::kOk) {
    return ge::GRAPH_FAILED;
  }
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
  if (with_k) {
    op.Input("q").ParamType(REQUIRED).DataType(MS_ROTARY_DY_TYPES).Format(MS_ROTARY_FORMATS);
    op.Input("k").ParamType(REQUIRED).DataType(MS_ROTARY_DY_TYPES).Format(MS_ROTARY_FORMATS);
  } else {
    op.Input("dy").ParamType(REQUIRED).DataType(MS_ROTARY_DY_TYPES).Format(MS_ROTARY_FORMATS);
  }
  op.Input("cos").ParamType(REQUIRED).DataType(MS_ROTARY_COS_TYPES).Format(MS_ROTARY_FORMATS);
  op.Input("sin").ParamType(REQUIRED).DataType(MS_ROTARY_COS_TYPES).Format(MS_ROTARY_FORMATS);
  if (gathers) {
    op.Input("positions").ParamType(REQUIRED).DataType(MS_ROTARY_POSITIONS_TYPES).Format(MS_ROTARY_FORMATS);
    op.Input("lane_masks").ParamType(REQUIRED).DataType(MS_ROTARY_LANE_MASK_TYPES).Format(MS_ROTARY_FORMATS);
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
