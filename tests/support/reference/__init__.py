"""Reference copies of the summarizer's extraction before issue 22's gates (see each module)."""
