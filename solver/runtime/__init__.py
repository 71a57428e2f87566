"""The live driver of the desk (DESIGN "The shape"): sockets, RPC answers and timers become
desk events; the desk's actions are carried out (signing, the journal, sending, polling).

- :mod:`solver.runtime.bot`: :class:`~solver.runtime.bot.LiveBot`, the wiring and the start and
  stop order; its parts by role: :mod:`~solver.runtime.bot_parts` (the I/O parts from the
  config), :mod:`~solver.runtime.inbound` (frames and callbacks become events),
  :mod:`~solver.runtime.jobs` (the timed reads), :mod:`~solver.runtime.recovery` (the desk from
  the journal, a standby's wait), :mod:`~solver.runtime.shadow_mode` (the paper book).
- :mod:`solver.runtime.executor`: carries out actions; :mod:`~solver.runtime.outbox`, its
  group commit: answers leave once their facts are durable.
- :mod:`solver.runtime.operator`: status, health, pause and resume for the control API.
- :mod:`solver.runtime.loop`: the event loop of long-running commands.
"""
