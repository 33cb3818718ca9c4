"""The data model: the small frozen records passed between the stages (:mod:`.records`) and the
runtime's facts written once (:mod:`.runtime`: ring count, compile defaults, the error enum, accepted
sizes).  Imports nothing else of ringtrace; every stage may use it."""
