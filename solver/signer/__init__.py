"""The signer as its own process (issue 28; DESIGN "The signer is a port"; STYLE 14).

The solver's Ed25519 key signs anything the bot asks when it lives in the bot's process: a bug or
a read of that process's memory is enough to sign a ``transfer`` that drains the account. This
package keeps the key in another process (``solver signer serve``), behind a policy that process
enforces whatever the bot asks, with every signature appended to an audit log:

- :mod:`.policy`: the rules (pure): quotes are ``token_diff`` to the verifier under the current
  salt, within a deadline and per-token outflow caps; every other intent only when named.
- :mod:`.keys` / :mod:`.hsm`: where the key lives: an owner-only key file, or a PKCS#11 token
  (SoftHSM2, an HSM) whose key never leaves it.
- :mod:`.wire`: the frames on the Unix socket (a batch of requests, answers in the same order).
- :mod:`.server`: the signer process; :mod:`.audit`: its audit log.
- :mod:`.client`: the bot's side: the deferred quote signer (batched per loop turn, never
  blocking the loop) and the intent signer of the operator commands and the rebalancer.
"""
