"""Lab 1 implementations: load one by module name or file path, and probe its single calls.

An implementation is a module with the starter's functions (``ensure_group``,
``produce_one``, ``consume_once``, ``rescue_once``): the reference ``solutions.lab1``, the
starter ``labs.lab1.starter``, or a student's file such as ``my_lab1.py``.

The probes check what a whole run cannot see clearly: that ``ensure_group`` creates the group
from the stream's start (with ``MKSTREAM``) and says whether it did, that ``produce_one`` trims
with an approximate ``MAXLEN`` and puts the counter in the fields, and that ``consume_once``
waits with ``BLOCK`` on an empty stream and treats the empty reply as normal.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

import redis

from labs.report import Check

REFERENCE = "solutions.lab1"
FUNCTIONS = ("ensure_group", "produce_one", "consume_once", "rescue_once")
PROBE_MAXLEN = 1000
PROBE_WRITES = 1350
PROBE_BLOCK_MS = 400


class ImplError(ValueError):
    """The implementation cannot be loaded or lacks one of the functions."""


def load_impl(spec: str = REFERENCE) -> ModuleType:
    """Import ``spec``: a dotted module name, or a path to a ``.py`` file."""
    path = Path(spec)
    if spec.endswith(".py") or path.is_file():
        if not path.is_file():
            raise ImplError(f"{spec}: no such file")
        name = f"lab1_impl_{path.stem}"
        loader = importlib.util.spec_from_file_location(name, path)
        if loader is None or loader.loader is None:
            raise ImplError(f"{spec}: cannot be loaded as a Python module")
        module = importlib.util.module_from_spec(loader)
        sys.modules[name] = module  # dataclasses look their module up while being defined
        loader.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(spec)
        except ImportError as exc:
            raise ImplError(f"{spec}: cannot import it ({exc})") from exc
    missing = [fn for fn in FUNCTIONS if not callable(getattr(module, fn, None))]
    if missing:
        raise ImplError(f"{spec} lacks {', '.join(missing)} (see labs/lab1/starter.py for the signatures)")
    return module


def _never(msg_id: str, fields: Mapping[str, str], worker: str) -> None:
    raise AssertionError(f"{worker} handled {msg_id} from an empty stream")


def probe_group(impl: ModuleType, client: redis.Redis, stream: str, group: str) -> Check:
    """``ensure_group`` creates the group at ``0`` with ``MKSTREAM`` and returns True; called again, False."""
    name = "ensure_group: XGROUP CREATE ... 0 MKSTREAM, True when created, False when it existed (BUSYGROUP)"
    client.delete(stream)
    try:
        first = impl.ensure_group(client, stream, group)
        client.xadd(stream, {"probe": "1"})  # the group starts at 0: it must see an entry added before a read
        again = impl.ensure_group(client, stream, group)
        groups = client.xinfo_groups(stream)
        lag = int(groups[0].get("lag") or 0) if groups else 0
    except Exception as exc:
        return Check(name, False, f"{type(exc).__name__}: {exc}")
    finally:
        client.delete(stream)
    if not groups or groups[0].get("name") != group:
        return Check(name, False, f"no group {group!r} on {stream} after ensure_group")
    if lag != 1 or str(groups[0].get("last-delivered-id")) != "0-0":
        return Check(name, False, "the group does not start at the stream's beginning: create it with id 0")
    if first is not True or again is not False:
        return Check(name, False, f"returned {first!r}, then {again!r}: expected True (created), then False "
                                  "(BUSYGROUP: it exists)")
    return Check(name, True, "created from id 0 (True), and again without an error (False)")


def probe_producer(impl: ModuleType, client: redis.Redis, stream: str) -> Check:
    """``produce_one`` returns the ID, carries the counter, and trims with ``MAXLEN ~``."""
    name = f"producer: XADD with MAXLEN ~ {PROBE_MAXLEN} and the counter in the fields"
    client.delete(stream)
    try:
        for counter in range(1, PROBE_WRITES + 1):
            msg_id = impl.produce_one(client, stream, counter, maxlen=PROBE_MAXLEN)
        length = int(client.xlen(stream))
        last = client.xrevrange(stream, count=1)
    except Exception as exc:
        return Check(name, False, f"{type(exc).__name__}: {exc}")
    finally:
        client.delete(stream)
    if not last or str(last[0][0]) != str(msg_id):
        return Check(name, False, f"produce_one returned {msg_id!r}, not the ID of the entry it added")
    if (last[0][1] or {}).get("counter") != str(PROBE_WRITES):
        return Check(name, False, f"the last entry's fields {last[0][1]} lack counter={PROBE_WRITES}")
    if length >= PROBE_WRITES:
        return Check(name, False, f"{PROBE_WRITES} XADDs left {length} entries: no MAXLEN was applied")
    if length <= PROBE_MAXLEN:
        return Check(
            name, False, f"{length} entries after {PROBE_WRITES} XADDs: that is an exact MAXLEN, use ~"
        )
    return Check(
        name, True, f"{PROBE_WRITES} XADDs left {length} entries (approximate trim keeps >= {PROBE_MAXLEN})"
    )


def probe_block(impl: ModuleType, client: redis.Redis, stream: str, group: str) -> Check:
    """On an empty stream ``consume_once`` waits about ``block_ms`` and returns 0."""
    name = f"consumer: XREADGROUP waits with BLOCK ({PROBE_BLOCK_MS} ms here) and an empty reply is normal"
    client.delete(stream)
    client.xgroup_create(stream, group, id="0", mkstream=True)
    started = time.monotonic()
    try:
        done = impl.consume_once(client, stream, group, "probe", _never, block_ms=PROBE_BLOCK_MS, count=10)
    except Exception as exc:
        return Check(name, False, f"{type(exc).__name__}: {exc}")
    finally:
        with contextlib.suppress(redis.RedisError):
            client.delete(stream)
    waited_ms = (time.monotonic() - started) * 1000
    if waited_ms < PROBE_BLOCK_MS / 2:
        return Check(name, False, f"returned after {waited_ms:.0f} ms: pass block=block_ms to XREADGROUP")
    if done not in (0, None):
        return Check(name, False, f"returned {done!r} for an empty stream, expected 0")
    return Check(name, True, f"waited {waited_ms:.0f} ms, returned {done!r}")
