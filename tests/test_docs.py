"""The documentation stays honest: worked examples are the spec's cases, links resolve.

`docs/cost-model.md` works hand-made version-2 and version-3 cases by
hand. Their profile and plan are fenced ```json blocks, each preceded by an
HTML comment `<!-- example: NAME profile -->` or `<!-- example: NAME plan -->`;
here each pair must be, value for value, one case of `v2-cases.json` or
`v3-cases.json` (`tests/data/`), and the
example's section must state that case's expected makespan and peak. Every
relative link in README.md and docs/*.md must point to a file of the
repository (and, for a `#fragment` into a Markdown file, to one of its
headings).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
COST_MODEL = ROOT / "docs" / "cost-model.md"
# The copy in the repository first; the spec's folder beside the checkout second.
CASE_FILES = (
    ROOT / "tests" / "data" / "v2-cases.json",
    ROOT.parent / "shared" / "spec" / "v2-cases.json",
)
V3_CASES = ROOT / "tests" / "data" / "v3-cases.json"

_EXAMPLE = re.compile(
    r"<!--\s*example:\s*(?P<name>[\w.-]+)\s+(?P<part>profile|plan)\s*-->\s*\n"
    r"```json\n(?P<body>.*?)\n```",
    re.DOTALL,
)
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _canonical(data) -> str:
    # sort_keys: key order is layout; json.dumps keeps 0 / 0.0 / false apart.
    return json.dumps(data, sort_keys=True)


def _cases() -> tuple[list[dict] | None, str]:
    v3 = json.loads(V3_CASES.read_text())["cases"] if V3_CASES.exists() else []
    for path in CASE_FILES:
        if path.exists():
            return json.loads(path.read_text())["cases"] + v3, f"{path} or {V3_CASES}"
    return None, "v2-cases.json is neither in tests/data nor in ../shared/spec beside the repo"


def _examples(text: str) -> dict[str, dict[str, object]]:
    found: dict[str, dict[str, object]] = {}
    for m in _EXAMPLE.finditer(text):
        parts = found.setdefault(m["name"], {})
        assert m["part"] not in parts, f"example {m['name']!r}: two {m['part']} blocks"
        parts[m["part"]] = json.loads(m["body"])
        parts[m["part"] + "_at"] = m.start()
    return found


def _section(text: str, at: int) -> str:
    """From the heading above `at` to the next heading of the same or a higher level."""
    start = text.rfind("\n#", 0, at) + 1
    level = len(text[start:].split(" ", 1)[0])
    nxt = re.compile(rf"^#{{1,{level}}}\s", re.MULTILINE).search(text, at)
    return text[start : nxt.start() if nxt else len(text)]


EXAMPLES = _examples(COST_MODEL.read_text()) if COST_MODEL.exists() else {}


def test_the_cost_model_page_has_worked_examples():
    assert COST_MODEL.exists(), "docs/cost-model.md is missing"
    assert EXAMPLES, "docs/cost-model.md marks no example (<!-- example: NAME profile -->)"
    for name, parts in EXAMPLES.items():
        assert {"profile", "plan"} <= parts.keys(), f"example {name!r} needs a profile and a plan"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_a_worked_example_is_a_spec_case(name):
    cases, where = _cases()
    if cases is None:
        pytest.skip(where)
    parts = EXAMPLES[name]
    profile, plan = _canonical(parts["profile"]), _canonical(parts["plan"])
    matches = [
        c for c in cases if _canonical(c["profile"]) == profile and _canonical(c["plan"]) == plan
    ]
    assert matches, (
        f"example {name!r} in docs/cost-model.md: its profile and plan are not one case of {where}"
    )
    want = matches[0]["expected"]
    text = COST_MODEL.read_text()
    section = _section(text, int(parts["profile_at"]))
    assert str(want["peak_bytes"]) in section, (
        f"example {name!r}: its section must state the peak {want['peak_bytes']} bytes"
    )
    makespan = f"{want['makespan']:.10g}"
    assert makespan in section, f"example {name!r}: its section must state the makespan {makespan}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for m in _HEADING.finditer(_FENCE.sub("", path.read_text())):
        slug = _slug(m[1])
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _links(text: str) -> list[str]:
    text = _CODE_SPAN.sub("", _FENCE.sub("", text))
    return [m[1] for m in _INLINE_LINK.finditer(text)] + [m[1] for m in _REF_LINK.finditer(text)]


DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_into_the_repository(doc):
    assert doc.exists(), f"{doc.relative_to(ROOT)} is missing"
    broken = []
    for link in _links(doc.read_text()):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", link) or link.startswith("//"):
            continue  # a URL (https:, mailto:, ...): not a file of the repository
        target, _, fragment = link.partition("#")
        path = (doc.parent / unquote(target)).resolve() if target else doc
        if not path.is_relative_to(ROOT):
            broken.append(f"{link} (outside the repository)")
        elif not path.exists():
            broken.append(f"{link} (no such file)")
        elif fragment and path.suffix == ".md" and unquote(fragment) not in _anchors(path):
            broken.append(f"{link} (no such heading in {path.relative_to(ROOT)})")
    assert not broken, f"{doc.relative_to(ROOT)}: broken links: {', '.join(broken)}"
