"""The mount option table, the helpers' argument conventions and utab lines, without mounting."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from h5fs import cli, mount_helper, mount_options, utab
from h5fs.mount_options import OPTIONS, OptionError, parse
from conftest import REPO

README = REPO / "README.md"
SAMPLE = {"uid": "0", "gid": "0", "umask": "022", "cache_mb": "64", "writeback_mb": "16", "flush_delay": "0.5",
          "chunk_kb": "256", "compression": "gzip:4,shuffle", "log": "/tmp/x.log", "readahead_kb": "0",
          "fsname": "data", "endpoint": "http://127.0.0.1:9000", "region": "eu-west-1", "profile": "p",
          "cache_dir": "/tmp/c", "disk_cache_mb": "512", "block_kb": "256", "requests": "4", "retries": "0",
          "timeout": "2.5", "username": "me", "password_file": "/etc/h5fs/pw", "refresh": "1.5"}


def test_every_option_parses_and_is_in_help_and_readme():
    readme = README.read_text()
    help_text = mount_options.help_text()
    for o in OPTIONS:
        text = f"{o.name}={SAMPLE[o.name]}" if o.value else o.name
        parse([text])
        shown = f"{o.name}={o.value}" if o.value else o.name
        assert shown in help_text
        assert f"| `{shown}` |" in readme, f"README's options table lacks {shown}"


def test_values_land_where_they_should():
    o = parse(["ro,uid=0,gid=root,umask=027,cache_mb=64,writeback_mb=16,flush_delay=0.5,chunk_kb=256",
               "compression=gzip:4,shuffle,verbose,log=rel.log,readahead_kb=0,fsname=a\\,b,allow_other"])
    assert o.readonly and (o.uid, o.gid, o.umask) == (0, 0, 0o027)
    assert (o.cache_mb, o.writeback_mb, o.flush_delay, o.chunk_kb, o.readahead_kb) == (64, 16, 0.5, 256, 0)
    assert o.compression == "gzip:4,shuffle" and o.verbose and o.log.endswith("/rel.log")
    assert o.fsname == "a,b"
    fuse = o.fuse_options("/f.h5")
    assert {"ro", "allow_other", "default_permissions", "subtype=h5fs", "fsname=a\\,b"} <= fuse
    assert not any(x.startswith(("uid=", "cache_mb", "log=")) for x in fuse)   # ours never reach FUSE


def test_remote_options_make_the_remote_options():
    o = parse(["endpoint=http://127.0.0.1:9000,region=eu-west-1,anonymous,profile=p,cache_dir=rel,disk_cache_mb=512",
               "block_kb=64,requests=4,retries=0,timeout=2.5"])
    r = o.remote
    assert (r.endpoint, r.region, r.anonymous, r.profile) == ("http://127.0.0.1:9000", "eu-west-1", True, "p")
    assert r.cache_dir == str(Path("rel").resolve())   # the daemon runs in /
    assert (r.disk_cache_mb, r.block_kb, r.requests, r.retries, r.timeout) == (512, 64, 4, 0, 2.5)
    assert parse(["cache_dir=none"]).remote.cache_path() is None
    d = parse([]).remote   # what a user who passes nothing gets
    assert (d.endpoint, d.anonymous, d.cache_dir, d.disk_cache_mb, d.block_kb, d.requests, d.retries, d.timeout) == \
        (None, False, None, 2048, 1024, 16, 3, 30.0)
    assert not any(x.startswith(("endpoint", "block_kb", "cache_dir")) for x in o.fuse_options("s3://b/k"))


@pytest.mark.parametrize("source, text, message", [
    ("/data/f.h5", "block_kb=64", "-o block_kb: options of a URL"),
    ("/data/f.h5", "anonymous,timeout=3", "-o anonymous,timeout: options of a URL"),
    ("https://example.org/f.h5", "anonymous", "-o anonymous: options of an s3:// URL"),
    ("http://example.org/f.h5", "endpoint=http://x:1,profile=p", "-o endpoint,profile: options of an s3:// URL"),
    ("s3://b/k.h5", "rw", "-o rw: s3://b/k.h5 is a remote object, mounted read-only"),
    ("s3://b/k.h5", "ro,rw", "mounted read-only"),
    ("/data/f.h5", "refresh=2", "-o refresh: options of an HSDS domain (hsds://)"),
    ("s3://b/k.h5", "username=me,password_file=p", "-o username,password_file: options of an HSDS domain"),
    ("hsds:///home/me/f.h5", "block_kb=64,region=r", "-o region,block_kb: options of an s3:// or http(s):// URL"),
])
def test_options_that_do_not_fit_the_source(source, text, message):
    o = parse([text])
    with pytest.raises(OptionError, match=re.escape(message)):
        mount_options.for_source(o, source, source.startswith(("s3:", "http")))


def test_a_url_is_mounted_read_only():
    o = parse(["rw,ro,block_kb=4"])
    mount_options.for_source(o, "s3://b/k.h5", True)
    assert o.readonly and "ro" in o.fuse_options("s3://b/k.h5")
    o = parse(["cache_mb=8"])
    mount_options.for_source(o, "/data/f.h5", False)
    assert not o.readonly   # a local file: as before


def test_hsds_options_land_and_the_domain_is_mounted_as_asked():
    o = parse(["endpoint=http://127.0.0.1:5101,username=me,password_file=pw,refresh=0.5,timeout=4,retries=1",
               "requests=8,cache_mb=32"])
    mount_options.for_source(o, "hsds:///home/me/f.h5", True)
    assert (o.remote.endpoint, o.username, o.refresh) == ("http://127.0.0.1:5101", "me", 0.5)
    assert o.password_file == str(Path("pw").resolve())   # the daemon runs in /
    assert (o.remote.timeout, o.remote.retries, o.remote.requests, o.cache_mb) == (4, 1, 8, 32)
    assert not o.readonly   # read-write, as a file you may write: the service says who may edit
    o = parse(["ro"])
    mount_options.for_source(o, "hsds:///home/me/f.h5", True)
    assert o.readonly and "ro" in o.fuse_options("hsds:///home/me/f.h5")
    assert parse([]).refresh == mount_options.DEFAULT_REFRESH
    with pytest.raises(OptionError, match="at least 0"):
        parse(["refresh=-1"])


def test_mount8_options_dropped_kernel_flags_passed():
    o = parse(["defaults,noauto,auto,user,users,nouser,_netdev,nofail,x-systemd.automount,"
               "x-systemd.requires=/data,comment=x,noatime,nodev,nosuid,subtype=h5fs"])
    assert o.kernel_flags == ["noatime", "nodev", "nosuid"]
    assert "x-systemd.requires=/data" in o.dropped and "nofail" in o.dropped and "defaults" in o.dropped
    assert not o.readonly


def test_last_of_ro_and_rw_wins():
    assert parse(["ro,rw"]).readonly is False
    assert parse(["rw", "ro"]).readonly is True


@pytest.mark.parametrize("text, message", [
    ("bogus", "unknown option 'bogus'"),
    ("max_read=131072", "unknown option 'max_read=131072'"),
    ("ro=1", "expected ro"),
    ("log", "expected log=PATH"),
    ("cache_mb=0", "at least 1"),
    ("cache_mb=1.5", "an integer is needed"),
    ("flush_delay=nan", "at least 0"),
    ("flush_delay=-1", "at least 0"),
    ("umask=8", "an octal number"),
    ("umask=1777", "between 000 and 777"),
    ("uid=no-such-user-h5fs", "no such user"),
    ("gid=no-such-group-h5fs", "no such group"),
    ("compression=gzip:12", "compression=gzip:12"),
    ("compression=zip", "unknown filter"),
    ("block_kb=3", "a power of two from 4 to 65536"),
    ("block_kb=131072", "a power of two from 4 to 65536"),
    ("block_kb=2", "a power of two from 4 to 65536"),
    ("requests=0", "at least 1"),
    ("requests=1000", "at most 256"),
    ("retries=-1", "at least 0"),
    ("timeout=0", "at least 0.001"),
    ("timeout=inf", "a number of seconds"),
    ("disk_cache_mb=0", "at least 1"),
    ("endpoint=127.0.0.1:9000", "an http:// or https:// URL"),
    ("region=", "a name is needed"),
    ("cache_dir=", "a directory, or none"),
    ("anonymous=1", "expected anonymous"),
])
def test_bad_options_say_what_is_wrong(text, message):
    with pytest.raises(OptionError, match=re.escape(message)):
        parse([text])


def test_bad_option_exits_2_before_touching_anything(tmp_path, capsys):
    assert cli.main(["mount", "-o", "bogus", str(tmp_path / "none.h5"), str(tmp_path)]) == 2
    assert "unknown option 'bogus'" in capsys.readouterr().err


def test_fuse3_form_is_mount():
    assert cli._fuse_form(["/d/f.h5", "/mnt", "-o", "ro,dev,suid"]) == ["mount", "-o", "ro,dev,suid", "/d/f.h5", "/mnt"]
    assert cli._fuse_form(["status"]) == ["status"]
    assert cli._fuse_form(["--version"]) == ["--version"]


def test_helper_arguments_follow_mount8():
    split = mount_helper._split_args
    assert split(["f.h5", "/mnt", "-o", "ro,x", "-v", "-n"], "otN") == (["f.h5", "/mnt"], {"o": ["ro,x"], "v": [""], "n": [""]}, "")
    assert split(["-ofoo", "-snv", "a", "b"], "otN") == (["a", "b"], {"o": ["foo"], "s": [""], "n": [""], "v": [""]}, "")
    assert split(["a", "b", "-o"], "otN")[2] == "-o needs a value"
    assert split(["a", "-l", "-t", "fuse.h5fs"], "tN") == (["a"], {"l": [""], "t": ["fuse.h5fs"]}, "")


def test_utab_lines_escape_and_match(tmp_path):
    line = utab.line_for("/data/a b.h5", "/mnt/x\ty")
    assert line == "SRC=/data/a\\040b.h5 TARGET=/mnt/x\\011y ROOT=/ OPTS=uhelper=h5fs"
    assert utab.fields(line)["TARGET"] == "/mnt/x\ty" and utab.ours(line)
    assert not utab.ours("SRC=/dev/sda TARGET=/mnt ROOT=/ OPTS=uhelper=udisks2")


def test_utab_edits_keep_other_lines(tmp_path):
    if not utab.add("/f.h5", "/probe", str(tmp_path)):
        pytest.skip("utab is edited by root only")
    other = "SRC=/dev/sdb1 TARGET=/media/usb ROOT=/ OPTS=uhelper=udisks2"
    path = tmp_path / "utab"
    path.write_text(other + "\n" + path.read_text())
    assert utab.add("/g.h5", "/mnt/g", str(tmp_path))
    assert utab.add("/g2.h5", "/mnt/g", str(tmp_path))   # one line per mount point
    lines = path.read_text().splitlines()
    assert lines[0] == other and sum("TARGET=/mnt/g " in ln for ln in lines) == 1 and "SRC=/g2.h5" in lines[-1]
    assert utab.remove("/mnt/g", str(tmp_path))
    assert utab.prune(str(tmp_path))   # /probe is no h5fs mount: pruned; udisks2's line stays
    assert path.read_text().splitlines() == [other]
