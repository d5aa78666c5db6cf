#!/usr/bin/env bash
# Builds and installs the Ascend custom op package (MsRotaryPartialRotaryMul, MsRotaryPartialRotaryMulGrad)
# with the custom-op compiler shipped in the mindspore wheel. Needs CANN: set ASCEND_HOME_PATH (or pass
# --cann PATH). Usage: kernel/ascend/build.sh [--soc ascend910b] [--cann /usr/local/Ascend/ascend-toolkit/latest]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
soc=""
cann="${ASCEND_HOME_PATH:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --soc) soc="$2"; shift 2 ;;
    --cann) cann="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 64 ;;
  esac
done

missing=()
compiler="$(python -c 'import mindspore, os; print(os.path.join(os.path.dirname(mindspore.__file__), "lib/plugin/ascend/custom_compiler/setup.py"))' 2>/dev/null || true)"
[ -n "$compiler" ] && [ -f "$compiler" ] || missing+=("MindSpore's custom op compiler (pip install mindspore==2.10.0; expected lib/plugin/ascend/custom_compiler/setup.py in the wheel)")
if [ -z "$cann" ]; then
  missing+=("CANN: ASCEND_HOME_PATH is not set (source <CANN>/set_env.sh, or pass --cann PATH)")
elif [ ! -d "$cann" ]; then
  missing+=("CANN: $cann does not exist")
else
  command -v bisheng >/dev/null 2>&1 || [ -x "$cann/compiler/ccec_compiler/bin/bisheng" ] || [ -x "$cann/bin/bisheng" ] || \
    missing+=("the Ascend C compiler (bisheng) under $cann")
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "cannot build the Ascend kernels here; missing:" >&2
  printf '  - %s\n' "${missing[@]}" >&2
  echo "the CPU kernel needs none of this (pip install .); the Ascend sources are checked on the host by tests/test_ascend_host.py" >&2
  exit 2
fi

# The compiler copies op_host/ and op_kernel/ into a CANN project; the tiling code and headers go along, and
# kernel/common's header into both.
staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT
mkdir -p "$staging/op_host" "$staging/op_kernel"
cp "$here"/op_host/*.cpp "$here"/op_host/*.h "$staging/op_host/"
cp "$here"/op_kernel/*.cpp "$here"/op_kernel/*.h "$staging/op_kernel/"
cp "$here"/../common/rotary_rules.h "$staging/op_host/"  # the rules the CPU kernel shares
cp "$here"/../common/rotary_rules.h "$staging/op_kernel/"
args=(-o "$staging/op_host" -k "$staging/op_kernel" --ascend_cann_package_path "$cann" -i)
[ -n "$soc" ] && args+=(--soc_version "$soc")
python "$compiler" "${args[@]}"
echo "installed; point ASCEND_CUSTOM_OPP_PATH at the printed vendor path, then ms_rotary uses the kernels on Ascend"
