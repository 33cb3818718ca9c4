#!/usr/bin/env bash
# Regenerate ringtrace/_pb/ from proto/ (the committed Perfetto subset).
#   scripts/gen-proto.sh            writes ringtrace/_pb/
#   scripts/gen-proto.sh OUT_DIR    writes OUT_DIR/ (the test compares it with the committed module)
# Uses grpcio-tools' bundled protoc (a dev dependency), so no system protoc is needed.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/ringtrace/_pb}"
python="${PYTHON:-$root/.venv/bin/python}"
[ -x "$python" ] || python=python3
mkdir -p "$out"
cd "$root/proto"
"$python" -m grpc_tools.protoc --proto_path=. --python_out="$out" --pyi_out="$out" ringtrace_perfetto.proto
[ -f "$out/__init__.py" ] || printf '"""Generated protobuf modules (scripts/gen-proto.sh); do not edit."""\n' > "$out/__init__.py"
