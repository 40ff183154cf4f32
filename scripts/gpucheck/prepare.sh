#!/usr/bin/env bash
# Copy the shared GPU check (../shared/gpu-check) into the checkout as .gpucheck/ and bring it up to this
# checkout's module layout, ready for one `run` call on a lent GPU machine (docs/gpu.md):
#
#   bash scripts/gpucheck/prepare.sh [SRC]        # SRC defaults to ../shared/gpu-check; GPUCHECK_DEST=.gpucheck
#   bash .gpucheck/device_check.sh --cpu --budget 900    # optional: every step on the CPU first (about a minute)
#
# The shared check was written against the layout before issue #35 (fusebench.training.*) and schema-3 records;
# layers-v3.patch moves its imports to fusebench.spec / engine / cells / components / runtime and reads the
# schema-4 metric entries. The copy is made in a temporary folder and moved into place only when the patch applied
# and every `from fusebench... import ...` in the scripts resolves, so a half-prepared .gpucheck is never left.
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC="${1:-../shared/gpu-check}"
DEST="${GPUCHECK_DEST:-.gpucheck}"
PATCH=scripts/gpucheck/layers-v3.patch
PY="${PYTHON:-python3}"
[ -f "$SRC/device_check.sh" ] || { echo "prepare: $SRC/device_check.sh not found (expected the shared GPU check)" >&2; exit 2; }

tmp="$(mktemp -d "${TMPDIR:-/tmp}/gpucheck.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cp -r "$SRC/." "$tmp/"
chmod -R u+w "$tmp"
if patch --dry-run -s -p1 -d "$tmp" < "$PATCH" > /dev/null 2>&1; then
  patch -s -p1 -d "$tmp" < "$PATCH"
  echo "prepare: $PATCH applied"
elif patch --dry-run -s -R -p1 -d "$tmp" < "$PATCH" > /dev/null 2>&1; then
  echo "prepare: $SRC already has the changes of $PATCH"
else
  echo "prepare: $PATCH does not apply to $SRC (the shared check changed): update the patch from a fresh copy" >&2
  patch --dry-run -p1 -d "$tmp" < "$PATCH" >&2 || true
  exit 1
fi

# every fusebench import of the check's scripts resolves in this checkout (module, and each imported name)
"$PY" - "$tmp" <<'EOF'
import ast
import importlib
import sys
from pathlib import Path

bad = []
for path in sorted(Path(sys.argv[1]).glob("*.py")):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "fusebench":
            try:
                module = importlib.import_module(node.module)
            except ImportError as e:
                bad.append(f"{path.name}:{node.lineno}: {node.module}: {e}")
                continue
            for alias in node.names:
                if not hasattr(module, alias.name):
                    try:
                        importlib.import_module(f"{node.module}.{alias.name}")
                    except ImportError:
                        bad.append(f"{path.name}:{node.lineno}: {node.module} has no {alias.name}")
if bad:
    sys.exit("prepare: imports that do not resolve in this checkout:\n  " + "\n  ".join(bad))
EOF

rm -rf "$DEST"
mv "$tmp" "$DEST"
trap - EXIT
echo "prepare: the GPU check is in $DEST/ (git-ignored); on the device: bash $DEST/device_check.sh (carry $DEST)"
