"""Every figure's source resolves inside the repository (issue 32, item 5).

A figure cites a key of its file's ``sources:`` table (the catalog's, the TCO defaults'); each
entry names a public page with the date it was read, or a section of docs/sources.md that
records what was taken, and the file and section it names exist. The ``ref`` snapshot the
catalog took most of its prices from is recorded in docs/sources.md: every ``ref`` figure's
value is in that record. A catalog whose figure cites an unlisted key, or a source with
nowhere to look, does not load.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from coreburst.common.catalog import CATALOG_PATH, CatalogError, Source, load_catalog, parse_catalog
from coreburst.tco.model import load_defaults

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "sources.md"
CAT = load_catalog()
DEFAULTS = load_defaults()
TABLES = {"catalog": CAT.sources, "onprem_defaults": DEFAULTS.sources}


def _sections() -> dict[str, str]:
    """docs/sources.md's ``## `` sections by their anchor (GitHub's: lower case, spaces to -)."""
    out: dict[str, str] = {}
    for part in DOC.read_text(encoding="utf-8").split("\n## ")[1:]:
        head, _, body = part.partition("\n")
        anchor = re.sub(r"[^\w\- ]", "", head.strip().lower()).replace(" ", "-")
        out[anchor] = body
    return out


def _cited() -> dict[str, set[str]]:
    return {
        "catalog": {fig.source for _, fig in CAT.figures()},
        "onprem_defaults": {fig.source for _, fig in DEFAULTS.figures()},
    }


def test_every_cited_source_is_listed_and_every_listed_one_is_cited() -> None:
    for table, cited in _cited().items():
        assert cited <= set(TABLES[table]), table
        # a listed source no figure uses would be a claim about nothing
        assert set(TABLES[table]) == cited, (table, set(TABLES[table]) - cited)


@pytest.mark.parametrize("table", sorted(TABLES))
def test_every_source_resolves_to_a_page_or_a_file_in_the_repository(table: str) -> None:
    sections = _sections()
    for key, src in TABLES[table].items():
        assert src.url or src.file, key
        if src.url:
            assert src.url.startswith("https://") and src.read, key
        if src.file:
            path, _, anchor = src.file.partition("#")
            assert (ROOT / path).is_file(), f"{key}: {path} is not in the repository"
            if path == "docs/sources.md":
                assert anchor in sections, f"{key}: docs/sources.md has no section #{anchor}"
        # the doc's key tables list every key, so a reader finds it from either file
        assert f"| `{key}` |" in DOC.read_text(encoding="utf-8"), key


def test_no_source_points_outside_the_repository() -> None:
    """The main source used to name shared/REFERENCE.md, a file the repository lacks."""
    text = CATALOG_PATH.read_text(encoding="utf-8")
    assert "shared/REFERENCE.md" not in text
    for src in CAT.sources.values():
        assert "REFERENCE.md" not in src.model_dump_json()


def test_every_ref_figure_is_in_the_recorded_snapshot() -> None:
    record = _sections()["ref"]
    values = {float(v.replace(",", "")) for v in re.findall(r"\$?(\d[\d,]*\.?\d*)", record)}
    refs = [(path, fig) for path, fig in CAT.figures() if fig.source == "ref"]
    assert len(refs) > 20
    missing = [path for path, fig in refs if float(fig.value) not in values]  # type: ignore[union-attr]
    assert missing == []


def test_a_figure_citing_an_unlisted_source_does_not_load() -> None:
    doc = yaml.safe_load(CATALOG_PATH.read_text(encoding="utf-8"))
    doc["nat_gateway"]["usd_per_hour"]["source"] = "somewhere"
    with pytest.raises(CatalogError) as exc:
        parse_catalog(yaml.safe_dump(doc), "cat.yaml")
    assert "nat_gateway.usd_per_hour cites 'somewhere', which sources does not list" in str(
        exc.value
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"title": "t", "took": "x"}, "give url (a public page) or file (in the repo)"),
        ({"title": "t", "took": "x", "url": "https://a.example/"}, "say when"),
        ({"title": "t", "took": "x", "url": "http://a.example/", "read": "2025-06"}, "https://"),
        ({"title": "t", "took": "x", "file": "/etc/passwd"}, "inside the repository"),
        ({"title": "t", "took": "x", "file": "../x.md"}, "inside the repository"),
        ({"title": "t", "took": "x", "file": "a.md", "read": "June"}, "YYYY-MM"),
    ],
)
def test_a_source_with_nowhere_to_look_is_refused(entry: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Source.model_validate(entry)
