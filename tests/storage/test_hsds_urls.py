"""hsds:// URLs: what names an HSDS domain, and the endpoint and domain path one names."""

from __future__ import annotations

import pytest

from h5fs.storage.hsds.settings import SettingsError, is_domain_url, split_domain_url


@pytest.mark.parametrize("url,endpoint,domain", [
    ("hsds:///home/me/run1.h5", None, "/home/me/run1.h5"),
    ("hsds://127.0.0.1:5101/home/me/run1.h5", "http://127.0.0.1:5101", "/home/me/run1.h5"),
    ("HSDS://hsds.example.org/shared/a b.h5", "http://hsds.example.org", "/shared/a b.h5"),
])
def test_a_domain_url_names_its_endpoint_and_domain(url, endpoint, domain):
    assert is_domain_url(url)
    assert split_domain_url(url) == (endpoint, domain)


@pytest.mark.parametrize("url,why", [
    ("hsds://host:5101", "no domain path"),
    ("hsds:///", "no domain path"),
    ("hsds://me:secret@host/home/me/f.h5", "no user, query or fragment"),
    ("hsds:///home/me/f.h5?x=1", "no user, query or fragment"),
])
def test_a_malformed_domain_url_is_refused(url, why):
    with pytest.raises(SettingsError, match=why):
        split_domain_url(url)


def test_files_and_other_urls_are_not_domains():
    for name in ("/data/f.h5", "s3://b/k.h5", "https://example.org/f.h5", "hsds.h5"):
        assert not is_domain_url(name)
