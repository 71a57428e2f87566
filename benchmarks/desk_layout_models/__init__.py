"""The desk's per-quote state in two layouts, as models (issue 29, ``benchmarks.desk_layout``).

``today`` (:mod:`.today`): the real records and indexes, glued as the replay's path does;
``slots`` and ``slots_str`` (:mod:`.slots`): slot arrays, assets as small ints or as names.
:mod:`.drive` holds what they are driven with and compared by.
"""
