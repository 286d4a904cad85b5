"""The rank <-> engine contract: what a live rank and the coordinator (the engine) exchange, and
how it travels.

Modules: :mod:`wire.messages` (ops, syncs, replies, values, exit), :mod:`wire.ops` (the
operations a rank issues: :class:`~wire.ops.IssuedOp`), :mod:`wire.control` (the launcher's
control channel to its fork server). Both sides import this package and it imports neither:
only the standard library (``pyproject.toml``'s import contracts): a rank's clock imports it
right after the fake-CUDA shim loads, before torch (a numpy import there would start
OpenBLAS's spinning worker threads in the clock's CPU account).

Transport: one ``multiprocessing.connection.Connection`` per rank (a socketpair made by the
launcher before it forks the rank), carrying pickled :class:`Batch` objects rank -> coordinator
and :class:`Reply` objects coordinator -> rank. Pickle is fine: both ends are our own processes.
Real values of collectives travel beside them and outside virtual time: :class:`ValueDelivery`
coordinator -> rank (read by the rank's receiver thread whenever they come) and
:class:`ValueUpdate` rank -> coordinator.

Time: every time is the rank's **virtual** clock in integer ns (see
``intercept.host_time.clock``). Within one rank, ``at_ns`` never decreases from one op to the
next, and a rank promises that nothing it sends later will carry an earlier time than the
``clock_ns`` of its last batch: that promise is what the conservative synchronisation builds on
(the *safe horizon* is the minimum of the running ranks' promises).

Ordering: the ops of one rank are in program order. Ops are buffered on the rank and sent as one
:class:`Batch` at the latest when the rank blocks (a :class:`Sync`), when it issues a
collective, when the buffer is long, or when a heartbeat is due (every few ms of wall time, so
a rank busy on the CPU does not hold the others back).

Streams are ``(device-local) stream ids`` as PyTorch reports them (0 = default stream); events
are ids the rank allocates. Collectives are matched across ranks by ``(group, seq)``: ``group``
is the process group's name and ``seq`` counts that group's collectives on each rank from 0.
A collective's ``op`` is an :class:`~wire.ops.IssuedOp`; whatever else a script calls
(``barrier``, ``gather``, coalesced and functional collectives) its producer translates into
these before sending.
"""
