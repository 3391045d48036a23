"""Tool caches kept per profile (orchardist/confine/caches.py): filled once from an attempt's
home, copied into each later one, never written by an attempt; what could reach outside the home
(a symlink) or block the copy (a FIFO) is left out. The real OpenCode using it:
tests/agents/test_tool_caches.py."""

from __future__ import annotations

import os
from pathlib import Path

from orchardist.confine import caches


def test_the_cache_is_filled_once_and_what_an_attempt_changes_in_its_copy_stays_there(
    tmp_path: Path,
) -> None:
    # Given an attempt's home that holds a tool's downloads (and a config it must not keep)
    entries = (".tool/node_modules", ".tool/package.json")
    first = tmp_path / "first"
    (first / ".tool/node_modules/pkg").mkdir(parents=True)
    (first / ".tool/node_modules/pkg/index.js").write_text("good()\n")
    (first / ".tool/package.json").write_text("{}")
    (first / ".tool/config.json").write_text('{"plugin": "evil"}')
    cache = caches.cache_folder(tmp_path / "caches", "opencode", "tool", "opencode")
    # When it ends, and then a second attempt rewrites its copy of the package and ends too
    assert caches.keep(first, cache, entries) == list(entries)
    second = tmp_path / "second"
    assert caches.restore(cache, second, entries) == list(entries)
    (second / ".tool/node_modules/pkg/index.js").write_text("evil()\n")
    assert caches.keep(second, cache, entries) == []
    # Then a third attempt still gets what the first one left, and never the config file
    third = tmp_path / "third"
    caches.restore(cache, third, entries)
    assert (third / ".tool/node_modules/pkg/index.js").read_text() == "good()\n"
    assert not (third / ".tool/config.json").exists()
    assert not (cache / ".tool/config.json").exists()


def test_an_entry_reached_through_a_symlink_or_a_fifo_is_not_kept(tmp_path: Path) -> None:
    # Given an attempt that pointed its tool folder at a secret elsewhere, and left a FIFO
    # (which would block a copy that opened it) inside its package folder
    secret = tmp_path / "elsewhere"
    (secret / "node_modules").mkdir(parents=True)
    (secret / "node_modules" / "key").write_text("secret")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".tool").symlink_to(secret)
    (home / ".npm").mkdir()
    os.mkfifo(home / ".npm" / "pipe")
    (home / ".npm" / "index").write_text("ok")
    cache = tmp_path / "caches" / "tool"
    # When orchardist keeps its cache entries
    assert caches.keep(home, cache, (".tool/node_modules", ".npm")) == [".npm"]
    # Then the secret was not copied, the FIFO was left out, the rest kept
    assert not (cache / ".tool").exists()
    assert sorted(p.name for p in (cache / ".npm").iterdir()) == ["index"]


def test_a_cache_over_512_mib_is_not_kept_and_leaves_nothing_behind(tmp_path: Path) -> None:
    # Given an attempt that left a 512 MiB + 1 byte file among its tool's downloads (sparse:
    # the size counts, not the disk it takes)
    home = tmp_path / "home"
    (home / ".npm").mkdir(parents=True)
    with (home / ".npm" / "huge").open("wb") as huge:
        huge.truncate((512 << 20) + 1)
    cache = tmp_path / "caches" / "tool"
    # When orchardist keeps its cache entries, then nothing is kept, not even a staging folder
    assert caches.keep(home, cache, (".npm",)) == []
    assert list((tmp_path / "caches").iterdir()) == []


def test_an_entry_the_first_attempt_lacked_is_kept_from_a_later_one_and_the_rest_stays(
    tmp_path: Path,
) -> None:
    # Given a first attempt whose tool downloaded into its npm cache but did not finish its
    # install (no node_modules yet), kept as the profile's cache
    entries = (".npm", ".tool/node_modules")
    first = tmp_path / "first"
    (first / ".npm").mkdir(parents=True)
    (first / ".npm" / "tarball").write_text("first")
    cache = tmp_path / "caches" / "tool"
    assert caches.keep(first, cache, entries) == [".npm"]
    # When a later attempt ends with both
    later = tmp_path / "later"
    (later / ".npm").mkdir(parents=True)
    (later / ".npm" / "tarball").write_text("later")
    (later / ".tool" / "node_modules").mkdir(parents=True)
    (later / ".tool" / "node_modules" / "index.js").write_text("installed")
    # Then only the missing entry is taken from it; the kept one is not replaced
    assert caches.keep(later, cache, entries) == [".tool/node_modules"]
    assert (cache / ".npm" / "tarball").read_text() == "first"
    assert (cache / ".tool" / "node_modules" / "index.js").read_text() == "installed"
