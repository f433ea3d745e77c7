"""``rtalab serve fuzz``: malformed-request fuzzing of the Reasoner.

:mod:`.engine` sends the requests, :mod:`.cli` is the command."""
