"""The documents hold together: every relative link and #anchor resolves, the README stays short."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted(
    [
        REPO / "README.md",
        REPO / "ARCHITECTURE.md",
        REPO / "dashboards" / "README.md",
        REPO / "systemd" / "README.md",
        *(REPO / "docs").glob("*.md"),
    ]
)

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
# [text](target "title") and ![alt](target); reference definitions [name]: target; HTML href.
INLINE_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
HREF = re.compile(r"<a\s[^>]*href=\"([^\"]+)\"", re.I)
HTML_ANCHOR = re.compile(r"<a\s[^>]*(?:id|name)=\"([^\"]+)\"", re.I)
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def without_code(text: str) -> str:
    """The text with fenced blocks and code spans blanked: a link shown as code is no link."""
    text = FENCE.sub(lambda match: "\n" * match.group(0).count("\n"), text)
    return CODE_SPAN.sub(lambda match: re.sub(r"[^\n]", " ", match.group(0)), text)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading (github-slugger over the rendered text).

    Rendering drops the markup (code ticks, emphasis, a link's target, HTML tags); the
    slugger lowercases, drops every character that is not a letter, digit, `_`, `-` or
    space, and turns each space into `-`.
    """
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"[`*]", "", text)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a link into `path` may name: its headings' slugs and its HTML ids."""
    text = path.read_text()
    found = set(HTML_ANCHOR.findall(text))
    seen: dict[str, int] = {}
    for heading in HEADING.findall(without_code(text)):
        slug = github_slug(heading)
        # GitHub numbers repeated headings: the second "Usage" is #usage-1.
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return found


def links(path: Path) -> list[str]:
    """The targets of every link in `path`, outside code."""
    text = without_code(path.read_text())
    return [
        target
        for pattern in (INLINE_LINK, REFERENCE_DEFINITION, HREF)
        for target in pattern.findall(text)
    ]


def broken_links(path: Path) -> list[str]:
    """Each relative link of `path` whose file, or whose #anchor in that file, is missing."""
    broken = []
    for target in links(path):
        if SCHEME.match(target):
            continue  # http:, https:, mailto:, file: point outside the repository
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading or anchor #{anchor} in {linked.name}")
    return broken


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(REPO)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_the_documents_link_into_docs() -> None:
    """The scan covers docs/, and the README reaches every document there."""
    docs = {path.name for path in (REPO / "docs").glob("*.md")}
    assert {"performance.md", "operations.md", "fleet-analysis.md", "metrics.md"} <= docs
    readme_links = {Path(target.partition("#")[0]).name for target in links(REPO / "README.md")}
    assert docs - readme_links == set()


def test_the_readme_stays_a_readme() -> None:
    """For a first-time user: under 250 lines, with figures and run logs left to docs/."""
    assert len((REPO / "README.md").read_text().splitlines()) < 250


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("Quick start", "quick-start"),
        ("Start, reload, stop", "start-reload-stop"),
        ("Timing drop-in (opt-in)", "timing-drop-in-opt-in"),
        ("The sampler alone (bench/sampler.py)", "the-sampler-alone-benchsamplerpy"),
        ("Fleet analysis (bench/fleet_report.py)", "fleet-analysis-benchfleet_reportpy"),
        ("Subscribing: `burstscope events`", "subscribing-burstscope-events"),
        ("**Bold** and [a link](x.md)", "bold-and-a-link"),
        ("Two  spaces", "two--spaces"),
        ("Rate 1.3\N{MULTIPLICATION SIGN} the C loop", "rate-13-the-c-loop"),
    ],
)
def test_github_slug(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug


def test_broken_links_finds_a_missing_file_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text('# Other\n\n## Usage\n\n## Usage\n\n<a id="kept"></a>\n')
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[fine](other.md) [heading](other.md#usage) [repeat](other.md#usage-1) "
        "[html](other.md#kept) [self](#page) [web](https://example.com/x#y)\n"
        "[gone](missing.md) [no anchor](other.md#nowhere) [no self anchor](#nothing)\n"
        "`[shown as code](missing.md)`\n\n"
        "```\n[in a fence](missing.md)\n```\n\n"
        "[ref]: also-missing.md\n"
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#nowhere: no heading or anchor #nowhere in other.md",
        "#nothing: no heading or anchor #nothing in page.md",
        "also-missing.md: no such file",
    ]
