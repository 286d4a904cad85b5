"""Real values for the tensors that steer control flow, kept beside the fake ones.

The value model (README, "Values"): a fake tensor is *valued* when the rank knows what a GPU
would hold in it. An op's fake outputs get values when every tensor input has them (real CPU
tensors always do) and every new output is either an integer or bool tensor of at most
:data:`VALUED_INT_MAX_NUMEL` elements or any tensor of at most :data:`VALUED_SMALL_MAX_NUMEL`
elements; the op then runs for real on the CPU. Big floating tensors, and everything computed
from them, stay fake (*unknown*), except the integers :mod:`intercept.values.value_model` derives
from them (router top-k, argmax, comparisons).

Values live in a real CPU storage per fake storage (its *shadow*), so views, slices and in-place
ops see each other's writes as on a GPU. A collective's outputs are known only once every member
has issued it: the coordinator computes them and sends them to the rank's receiver thread as
soon as they are known, outside virtual time. Until then the output storages are *pending*,
and ops that touch them are queued and replayed in program order when the values arrive, the
way a GPU runs them in stream order; a collective that sends pending values sends them once
they are computed (``ValueUpdate``). Reading a value (``.item()``, ``.tolist()``,
data-dependent shapes) happens after a host sync, as on a GPU, and waits for values still on
their way (:meth:`ValueStore.wait`).

The CPU time spent here is the simulator's: callers run it inside ``runtime.excluded()``.
"""

import threading
import weakref
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map

VALUED_INT_MAX_NUMEL = 1 << 22
"""Integer and bool tensors up to this many elements (32 MiB of int64) carry values."""
VALUED_SMALL_MAX_NUMEL = 1 << 10
"""Tensors of any dtype up to this many elements carry values (loss scales, step counters)."""
VALUE_HINT = "_phantora_valued"
"""Attribute set on fake tensors that may have values: lets ops on plain fake tensors skip the
storage lookups (a hint only: the storage's shadow decides)."""

_UNKNOWN = object()
"""An input of a queued action whose values were unknown when it was queued."""
FAILED = object()
"""What an op's real run returns when it raised (its outputs stay unknown)."""
Values = dict[int, "np.ndarray | None"]
"""Collective value id -> the flat values of its outputs (``None``: unknown)."""


def is_real(t: torch.Tensor) -> bool:
    """A real CPU tensor (the script's small CPU work): its own values."""
    return not isinstance(t, FakeTensor)


def valuable(t: torch.Tensor) -> bool:
    """Whether a tensor of this dtype and size carries values (module docstring)."""
    numel = t.numel()
    if numel <= VALUED_SMALL_MAX_NUMEL:
        return True
    return numel <= VALUED_INT_MAX_NUMEL and not (t.dtype.is_floating_point or t.dtype.is_complex)


def to_numpy(real: torch.Tensor) -> np.ndarray:
    """Flat values for the wire (bfloat16, which numpy lacks, travels as float32)."""
    flat = real.detach().reshape(-1)
    if flat.dtype == torch.bfloat16:
        flat = flat.float()
    return flat.numpy().copy()


@dataclass(frozen=True, slots=True)
class _Slot:
    """Where a fake tensor's values sit in its storage's shadow. ``key`` names the shadow of one
    fake storage for that storage's lifetime (never reused), so a slot does not keep the fake
    storage alive: the simulated device memory is freed when the script drops it, however long
    the values take to arrive."""

    key: int
    nbytes: int
    """The fake storage's size (the shadow's at least)."""
    dtype: torch.dtype
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


@dataclass(slots=True)
class _Fill:
    """A collective's outputs, written when its values arrive."""

    value_id: int
    targets: list["_Slot | torch.Tensor"]
    """In output order: the slot of a fake output, or a real CPU output (written in place)."""

    @property
    def slots(self) -> list[_Slot]:
        return [t for t in self.targets if isinstance(t, _Slot)]


@dataclass(slots=True)
class _Send:
    """A collective's inputs that were pending when it was issued: sent once computed."""

    value_id: int
    inputs: list[Any]
    """Slots (pending) and snapshots (known) of the inputs, in order."""


@dataclass(slots=True)
class _Deferred:
    """An op that touched pending values, run when they have arrived."""

    func: Any
    """``None``: the op wrote unknown values into ``written``."""
    args: Any
    kwargs: Any
    outputs: list[tuple[int, _Slot]]
    """(position among the op's flat results, slot) of each new fake output."""
    written: list[_Slot]
    """Slots of the tensors the op writes in place (their storages are pending until then)."""


class ValueStore:
    """The shadows of one rank's valued fake tensors and the actions waiting on collectives.

    Thread-safe (autograd's thread runs ops too). ``generator`` draws the random values of
    random ops on valued GPU tensors (``randint``, ``randperm``), so they leave the script's
    CPU generator alone.
    """

    def __init__(self, generator: torch.Generator) -> None:
        self._generator = generator
        self._lock = threading.RLock()
        self._arrival = threading.Condition(self._lock)
        self._send_update: Callable[[int, "np.ndarray | None"], None] | None = None
        self._shadows: dict[int, torch.UntypedStorage] = {}
        """Shadow key -> the real CPU bytes (absent: values unknown)."""
        self._keys: dict[int, int] = {}
        """Live fake storage (``_cdata``, reused once it dies) -> its shadow key."""
        self._refs: dict[int, weakref.ref] = {}
        """Shadow key -> a weak reference to its fake storage (its death releases the shadow)."""
        self._orphans: set[int] = set()
        """Shadows of dead storages that queued actions may still read or write."""
        self._next_key = 0
        self._pending: Counter[int] = Counter()
        """Storage key -> queued actions that write it."""
        self._queue: deque[_Fill | _Send | _Deferred] = deque()
        self._arrived: Values = {}
        self.failed_ops: Counter[str] = Counter()
        """Ops whose real CPU run raised: their outputs stay unknown."""

    # -- state of a tensor ---------------------------------------------------------------------
    def known(self, t: torch.Tensor) -> bool:
        """``t``'s values are known now (a real tensor, or a shadow nothing is pending on)."""
        if is_real(t):
            return True
        key = self._keys.get(t.untyped_storage()._cdata)
        return key in self._shadows and not self._pending[key]

    def pending(self, t: torch.Tensor) -> bool:
        if is_real(t):
            return False
        key = self._keys.get(t.untyped_storage()._cdata)
        return key is not None and self._pending[key] > 0

    def hinted(self, t: torch.Tensor) -> bool:
        return is_real(t) or getattr(t, VALUE_HINT, False)

    def real(self, t: torch.Tensor) -> torch.Tensor | None:
        """A real CPU tensor viewing ``t``'s values, or ``None`` where they are not known."""
        with self._lock:
            if is_real(t):
                return t
            if not self.known(t):
                return None
            return self._view(self._slot(t))

    # -- ops -----------------------------------------------------------------------------------
    def after_op(self, func: Any, args: Any, kwargs: Any, out: Any,
                 inputs: Sequence[torch.Tensor]) -> None:
        """Give ``out`` (the fake results of ``func``) values where the policy says so."""
        if func.is_view:
            for t in _fakes(out):  # same storage: the shadow is shared already
                if any(self.hinted(i) for i in inputs):
                    setattr(t, VALUE_HINT, True)
            return
        if inputs and not any(self.hinted(t) for t in inputs):
            return
        with self._lock:
            written = _written(func, args, kwargs)
            if any(not self.known(t) and not self.pending(t) for t in inputs
                   if not _is_whole_overwrite(func, t, written)):
                self._forget(written)
                return
            new = [(i, t) for i, t in enumerate(_flat(out))
                   if isinstance(t, FakeTensor) and not any(t is w for w in written)]
            if not all(valuable(t) for _, t in new) or (not new and not written):
                self._forget(written)
                return
            for t in written:
                if not is_real(t):
                    self._ensure_shadow(t)
            outputs = [(i, self._slot(t)) for i, t in new]
            for _, slot in outputs:
                self._ensure_shadow_slot(slot)
            written_slots = [self._slot(t) for t in written if not is_real(t)]
            if any(self.pending(t) for t in inputs):
                self._defer(func, args, kwargs, outputs, written_slots)
            else:
                self._run(func, self._realize(args), self._realize(kwargs), outputs,
                          written_slots)
            for _, t in new:
                setattr(t, VALUE_HINT, True)

    def run_real(self, func: Any, args: Any, kwargs: Any) -> Any:
        """``func`` on the known values of its inputs, on the CPU; ``None`` if it raises."""
        with self._lock:
            result = self._call(func, self._realize(args), self._realize(kwargs))
        return None if result is FAILED else result

    def set_values(self, t: torch.Tensor, values: torch.Tensor) -> None:
        """Give fake ``t`` the real ``values`` (same shape): a value model's output."""
        with self._lock:
            slot = self._slot(t)
            self._ensure_shadow_slot(slot)
            self._view(slot).copy_(values)
            setattr(t, VALUE_HINT, True)

    # -- collectives ---------------------------------------------------------------------------
    def set_update_sender(self, send: Callable[[int, "np.ndarray | None"], None]) -> None:
        """How the final values of inputs sent as pending reach the coordinator."""
        self._send_update = send

    def payload(self, value_id: int, inputs: Sequence[torch.Tensor]) -> tuple[
            "np.ndarray | None", bool]:
        """``(values, pending)`` of a collective's inputs, flat and concatenated: known now,
        unknown (``None``), or pending on an earlier collective (sent when computed)."""
        with self._lock:
            if any(self.pending(t) for t in inputs):
                def slot(t: torch.Tensor) -> Any:
                    if self.pending(t):
                        return self._slot(t)
                    real = self.real(t)
                    return _UNKNOWN if real is None else _Snapshot(real.clone())
                self._queue.append(_Send(value_id, [slot(t) for t in inputs]))
                return None, True
            return _concatenated([self.real(t) for t in inputs]), False

    def expect(self, value_id: int, outputs: Sequence[torch.Tensor]) -> bool:
        """A collective will write ``outputs``: queue their fill. Returns whether any output
        takes values (else nothing is queued)."""
        outputs = [t for t in outputs if t.numel() and valuable(t)]
        if not outputs:
            return False
        with self._lock:
            targets: list[_Slot | torch.Tensor] = []
            for t in outputs:
                if is_real(t):
                    targets.append(t)
                    continue
                slot = self._slot(t)
                self._ensure_shadow_slot(slot)
                self._pending[slot.key] += 1
                targets.append(slot)
                setattr(t, VALUE_HINT, True)
            self._queue.append(_Fill(value_id, targets))
            return True

    def deliver(self, values: Iterable[tuple[int, "np.ndarray | None"]]) -> None:
        """Values of collectives arrived: run what waited on them (any thread)."""
        with self._lock:
            self._arrived.update(values)
            self._drain()
            self._arrival.notify_all()

    def wait_sent(self, timeout_s: float) -> bool:
        """Block until the inputs of every collective sent as pending have gone out (a rank
        that exits still owes them to the other members); False if ``timeout_s`` passed."""
        with self._lock:
            return self._arrival.wait_for(
                lambda: not any(isinstance(a, _Send) for a in self._queue), timeout_s)

    def wait(self, tensors: Sequence[torch.Tensor], timeout_s: float) -> bool:
        """Block until no tensor of ``tensors`` is pending; False if ``timeout_s`` passed."""
        with self._lock:
            return self._arrival.wait_for(lambda: not any(self.pending(t) for t in tensors),
                                          timeout_s)

    # -- internals -----------------------------------------------------------------------------
    def _drain(self) -> None:
        while self._queue:
            action = self._queue[0]
            if isinstance(action, _Fill):
                if action.value_id not in self._arrived:
                    return
                self._fill(action, self._arrived.pop(action.value_id))
            elif isinstance(action, _Send):
                inputs = self._resolve(action.inputs)
                data = None if inputs is None else _concatenated(inputs)
                if self._send_update is not None:
                    self._send_update(action.value_id, data)
            else:
                if action.func is None:
                    self._forget_slots(action.written)
                else:
                    self._run(action.func, self._resolve(action.args),
                              self._resolve(action.kwargs), action.outputs, action.written)
                for slot in action.written:
                    self._pending[slot.key] -= 1
                for _, slot in action.outputs:
                    self._pending[slot.key] -= 1
            self._queue.popleft()
        orphans, self._orphans = self._orphans, set()
        for key in orphans:  # nothing queued refers to them any more
            self._shadows.pop(key, None)
            self._pending.pop(key, None)

    def _fill(self, fill: _Fill, flat: "np.ndarray | None") -> None:
        targets = fill.targets
        total = sum(_numel(t) for t in targets)
        if flat is None or flat.size != total:
            for slot in fill.slots:
                self._pending[slot.key] -= 1
                self._drop(slot.key)
            return
        values = torch.from_numpy(np.ascontiguousarray(flat))
        at = 0
        for target in targets:
            n = _numel(target)
            with _disable_current_modes():
                view = self._view(target) if isinstance(target, _Slot) else target
                view.copy_(values[at:at + n].view(view.shape).to(view.dtype))
            at += n
        for slot in fill.slots:
            self._pending[slot.key] -= 1

    def _run(self, func: Any, args: Any, kwargs: Any, outputs: list[tuple[int, _Slot]],
             written: list[_Slot]) -> None:
        """Run ``func`` on real CPU values; write its new outputs into their shadows."""
        if args is None or kwargs is None:  # an input became unknown meanwhile
            self._forget_slots([*written, *(slot for _, slot in outputs)])
            return
        result = self._call(func, args, kwargs)
        if result is FAILED:
            self._forget_slots([*written, *(slot for _, slot in outputs)])
            return
        flat = _flat(result)
        with _disable_current_modes():
            for position, slot in outputs:
                real = flat[position] if position < len(flat) else None
                if not isinstance(real, torch.Tensor) or tuple(real.shape) != slot.size:
                    self._drop(slot.key)
                    continue
                self._view(slot).copy_(real)

    def _call(self, func: Any, args: Any, kwargs: Any) -> Any:
        """``func`` on real CPU tensors (its devices moved to the CPU, GPU random draws from
        this store's generator); :data:`FAILED` if it raises."""
        kwargs = dict(kwargs)
        if "generator" in _argument_names(func) and kwargs.get("generator") is None:
            kwargs["generator"] = self._generator
        try:
            with _disable_current_modes(), torch.no_grad():
                return func(*_on_cpu(args), **_on_cpu(kwargs))
        except Exception:  # noqa: BLE001 - a value we cannot compute is unknown, not fatal
            self.failed_ops[str(func)] += 1
            return FAILED

    def _defer(self, func: Any, args: Any, kwargs: Any, outputs: list[tuple[int, _Slot]],
               written: list[_Slot]) -> None:
        def template(value: Any) -> Any:
            if not isinstance(value, torch.Tensor):
                return value
            if self.pending(value):
                return self._slot(value)
            real = self.real(value)
            return _UNKNOWN if real is None else _Snapshot(real.clone())
        for slot in [*written, *(slot for _, slot in outputs)]:
            self._pending[slot.key] += 1
        self._queue.append(_Deferred(func, tree_map(template, args), tree_map(template, kwargs),
                                     outputs, written))

    def _resolve(self, template: Any) -> Any:
        """Real tensors for a deferred op's inputs, or ``None`` if one is unknown by now."""
        missing = False

        def real(value: Any) -> Any:
            nonlocal missing
            if value is _UNKNOWN:
                missing = True
                return None
            if isinstance(value, _Snapshot):
                return value.tensor
            if isinstance(value, _Slot):
                if value.key not in self._shadows:
                    missing = True
                    return None
                return self._view(value)
            return value
        resolved = tree_map(real, template, is_leaf=lambda v: isinstance(v, (_Slot, _Snapshot)))
        return None if missing else resolved

    def _realize(self, tree: Any) -> Any:
        return tree_map(lambda v: self.real(v) if isinstance(v, torch.Tensor) else v, tree)

    def _view(self, slot: _Slot) -> torch.Tensor:
        with _disable_current_modes():
            return torch.empty(0, dtype=slot.dtype).set_(
                self._shadows[slot.key], slot.offset, slot.size, slot.stride)

    def _slot(self, t: torch.Tensor) -> _Slot:
        """``t``'s slot; its storage gets a shadow key if it had none."""
        storage = t.untyped_storage()
        cdata = storage._cdata
        key = self._keys.get(cdata)
        if key is None:
            key = self._keys[cdata] = self._next_key
            self._next_key += 1
            self._refs[key] = weakref.ref(
                storage, lambda _, key=key, cdata=cdata: self._release(key, cdata))
        return _Slot(key, storage.nbytes(), t.dtype, t.storage_offset(), tuple(t.shape),
                     tuple(t.stride()))

    def _ensure_shadow(self, t: torch.Tensor) -> None:
        self._ensure_shadow_slot(self._slot(t))

    def _ensure_shadow_slot(self, slot: _Slot) -> None:
        key = slot.key
        found = self._shadows.get(key)
        if found is not None and found.nbytes() >= slot.nbytes:
            return
        with _disable_current_modes():
            shadow = torch.UntypedStorage(slot.nbytes)
            if found is not None:
                shadow[:found.nbytes()].copy_(found)
        self._shadows[key] = shadow

    def _release(self, key: int, cdata: int) -> None:
        """A fake storage died: its address may be reused, its shadow goes once no queued
        action can refer to it."""
        with self._lock:
            if self._keys.get(cdata) == key:
                del self._keys[cdata]
            self._refs.pop(key, None)
            if self._queue:
                self._orphans.add(key)
            else:
                self._shadows.pop(key, None)
                self._pending.pop(key, None)

    def _drop(self, key: int) -> None:
        self._shadows.pop(key, None)

    def _forget(self, written: Sequence[torch.Tensor]) -> None:
        """The op wrote unknown values into ``written``."""
        for t in written:
            if is_real(t):
                continue
            key = self._keys.get(t.untyped_storage()._cdata)
            if key is None:
                continue
            if self._pending[key]:  # order behind the queued writes
                self._defer_forget(self._slot(t))
            else:
                self._drop(key)

    def _defer_forget(self, slot: _Slot) -> None:
        self._pending[slot.key] += 1
        self._queue.append(_Deferred(None, (), {}, [], [slot]))

    def _forget_slots(self, slots: Sequence[_Slot]) -> None:
        for slot in slots:
            self._drop(slot.key)


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """A known input of a deferred op, copied when the op was issued."""

    tensor: torch.Tensor


def _concatenated(reals: Sequence["torch.Tensor | None"]) -> "np.ndarray | None":
    """Flat values of several tensors of one dtype, end to end (``None`` if one is unknown)."""
    if not reals or any(r is None for r in reals):
        return None
    if len({r.dtype for r in reals if r is not None}) != 1:
        return None
    return np.concatenate([to_numpy(r) for r in reals if r is not None])


def _numel(target: "torch.Tensor | _Slot") -> int:
    if isinstance(target, _Slot):
        n = 1
        for s in target.size:
            n *= s
        return n
    return target.numel()


def _flat(out: Any) -> list[Any]:
    return tree_flatten(out)[0]


def _fakes(out: Any) -> list[FakeTensor]:
    return [t for t in _flat(out) if isinstance(t, FakeTensor)]


_ARGUMENT_NAMES: dict[Any, frozenset[str]] = {}


def _argument_names(func: Any) -> frozenset[str]:
    names = _ARGUMENT_NAMES.get(func)
    if names is None:
        names = _ARGUMENT_NAMES[func] = frozenset(a.name for a in func._schema.arguments)
    return names


_WRITTEN: dict[Any, tuple[str, ...]] = {}


def _written(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors ``func`` writes in place (``self`` of ``add_``, ``out=``, ``_foreach_*_``)."""
    names = _WRITTEN.get(func)
    if names is None:
        names = _WRITTEN[func] = tuple(
            a.name for a in func._schema.arguments
            if a.alias_info is not None and a.alias_info.is_write)
    if not names:
        return []
    bound = dict(zip((a.name for a in func._schema.arguments), args, strict=False))
    bound.update(kwargs)
    return [t for name in names for t in tree_flatten(bound.get(name))[0]
            if isinstance(t, torch.Tensor)]


_OVERWRITES = frozenset({"aten::copy_", "aten::fill_", "aten::zero_", "aten::random_",
                         "aten::uniform_", "aten::normal_"})


def _is_whole_overwrite(func: Any, t: torch.Tensor, written: Sequence[torch.Tensor]) -> bool:
    """``t`` is an op's output buffer whose old values do not matter: the op overwrites all of
    its storage (``copy_`` into a fresh buffer)."""
    if not any(t is w for w in written) or func._schema.name not in _OVERWRITES:
        return False
    return t.is_contiguous() and t.numel() * t.element_size() == t.untyped_storage().nbytes()


def _on_cpu(tree: Any) -> Any:
    """Device arguments of a real run point at the CPU (``.to('cuda')`` of a valued tensor)."""
    def cpu(value: Any) -> Any:
        if isinstance(value, torch.device) and value.type != "cpu":
            return torch.device("cpu")
        return value
    return tree_map(cpu, tree)

