"""Starting the live ranks: what the coordinator hands each rank, and the launcher.

Both sides import this package and it imports neither: the coordinator (``phantora``) builds a
:class:`~launch.spec.LaunchSpec` (the :class:`~launch.program.Program` to run, the GPU, the
reference host, the value model of :mod:`launch.value_policy`) and starts the ranks with
:class:`~launch.launcher.Launcher`, which runs the rank side's fork server
(``intercept.process.fork_server``) by its module path; the rank side reads the same spec. It
imports only the shared models (``hwmodel``: the GPU catalogue, the errors) and the ``wire``
(``pyproject.toml``'s import contracts).
"""
