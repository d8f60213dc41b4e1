"""Facts about a program, computed and never changed: its constants and their storage, its
ops, where its nodes came from, what was delegated, what a fold would fold. No passes here."""
