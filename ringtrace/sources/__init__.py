"""Where runs are and what they are called: build-tree paths -> labels, and the one directory walk and
symlink policy of every command (:mod:`.paths`).  Touches the disk only to list and sniff; the caller
(a one-shot command, or the tailer on the reader thread) owns the results."""
