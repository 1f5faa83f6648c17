#!/usr/bin/env bash
# Checks the relative links of the docs: every [text](target) and ![alt](target) in README.md,
# CONTRIBUTING.md and docs/**/*.md must point to a file or directory that exists, and a
# `#anchor` to a heading of the Markdown page it names (GitHub's heading ids). Links to other
# sites (https:, mailto:) are not checked; code blocks and `code spans` are skipped.
#
# Usage, from anywhere in the repository: scripts/check-doc-links.sh
# Prints each broken link as FILE:LINE: TARGET: why, and exits 1 if there is one.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 - <<'PY'
import pathlib, re, sys, unicodedata

# Pages that other branches add. A link to one of them passes while it is missing (with a
# note); once the page exists it is checked like any other, and the note asks to remove it here.
PENDING: set = set()

root = pathlib.Path.cwd()
pages = [root / "README.md", root / "CONTRIBUTING.md"] + sorted((root / "docs").rglob("*.md"))
pages = [p for p in pages if p.exists()]

FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def blank(text):
    """The text with code blocks and code spans replaced by spaces (lines kept in place)."""
    out, fence = [], None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fence:
            if m and m.group(2)[0] == fence[0] and len(m.group(2)) >= len(fence):
                fence = None
            out.append("")
            continue
        if m:
            fence = m.group(2)
            out.append("")
            continue
        out.append(re.sub(r"(`+)(.+?)\1", lambda c: " " * len(c.group(0)), line))
    return "\n".join(out)


def slug(heading):
    """GitHub's id of a heading: markup dropped, lower case, punctuation removed, spaces to -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = text.replace("`", "")
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    kept = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in " -_" or cat[0] in "LN" or cat == "Mn":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


anchors_of = {}


def anchors(page):
    if page not in anchors_of:
        ids, seen, fence = set(), {}, None
        for line in page.read_text(encoding="utf-8").split("\n"):
            m = FENCE.match(line)
            if fence:
                if m and m.group(2)[0] == fence[0] and len(m.group(2)) >= len(fence):
                    fence = None
                continue
            if m:
                fence = m.group(2)
                continue
            h = HEADING.match(line)
            if h:
                base = slug(h.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                ids.add(base if n == 0 else f"{base}-{n}")
        anchors_of[page] = ids
    return anchors_of[page]


broken, pending_used = [], set()
for page in pages:
    text = blank(page.read_text(encoding="utf-8"))
    found = [(m.start(), m.group(1)) for m in LINK.finditer(text)]
    found += [(m.start(), m.group(1)) for m in REFDEF.finditer(text)]
    for offset, target in found:
        line = text.count("\n", 0, offset) + 1
        where = f"{page.relative_to(root)}:{line}: {target}"
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target) or target.startswith("//"):
            continue  # another site
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        try:
            rel = dest.relative_to(root).as_posix()
        except ValueError:
            broken.append(f"{where}: points outside the repository")
            continue
        if not dest.exists():
            if rel in PENDING:
                pending_used.add(rel)
                continue
            broken.append(f"{where}: no such file")
            continue
        if anchor and dest.suffix == ".md" and dest.is_file():
            if anchor not in anchors(dest):
                broken.append(f"{where}: no heading with that id in {rel}")

for rel in sorted(PENDING):
    if (root / rel).exists():
        print(f"note: {rel} exists now; remove it from PENDING in scripts/check-doc-links.sh")
for rel in sorted(pending_used):
    print(f"note: {rel} is linked but not there yet (PENDING: another branch adds it)")
for b in broken:
    print(b)
print(f"checked the links of {len(pages)} pages: {len(broken)} broken")
sys.exit(1 if broken else 0)
PY
