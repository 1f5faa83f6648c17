#!/usr/bin/env bash
# Lists the tenure library's public API as rustdoc renders it (default features): one line per
# item (its path), under each its own variants, fields and inherent methods (trait impls left
# out), then the totals. Usage, from the repository root: scripts/public-api.sh [TARGET_DIR]
set -euo pipefail
target=${1:-target}
cargo doc -q -p tenure --no-deps --target-dir "$target" >/dev/null
python3 - "$target/doc" <<'PY'
import pathlib, re, sys
root = pathlib.Path(sys.argv[1])
kinds = ("struct", "enum", "trait", "fn", "type", "constant", "macro")
items, members = [], 0
for page in sorted((root / "tenure").rglob("*.html")):
    kind, _, name = page.stem.partition(".")
    if kind not in kinds:
        continue
    html = page.read_text()
    if 'http-equiv="refresh"' in html:
        continue  # a redirect page, not an item
    path = "::".join(page.relative_to(root).parent.parts + (name,))
    items.append(f"{kind} {path}")
    own = html.split('id="trait-implementations"')[0]
    for m in sorted(set(re.findall(r'id="(variant|structfield|method|tymethod)\.(\w+)"', own))):
        items.append(f"  {m[0]} {path}::{m[1]}")
        members += 1
print("\n".join(items))
print(f"items: {sum(not i.startswith(' ') for i in items)}, members: {members}")
PY
