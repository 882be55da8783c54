"""Fixtures the agents tests share."""

import pytest


@pytest.fixture(scope="module")
def families():
    """``(templates folder, {family name: Family})`` of the llama-cpp-python sdist's real chat templates
    (downloaded once and cached); skipped where they cannot be fetched."""
    from support_realtemplates import TemplatesUnavailable, template_dir
    from support_sdist import sdist_families

    try:
        templates = template_dir()
    except TemplatesUnavailable as err:
        pytest.skip(f"the real chat templates cannot be fetched: {err}")
    return templates, {f.name: f for f in sdist_families(templates)[0]}
