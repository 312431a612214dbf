"""The model families: each module here defines ``FAMILY`` (``registry.Family``); ``registry`` gathers them."""
