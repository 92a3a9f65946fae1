"""traceinsight: why is the GPU not busy, and what to change."""

__version__ = "0.1.0"
