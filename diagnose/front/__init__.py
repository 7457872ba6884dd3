"""The front end: the command line, the Python API, the pipeline from a path to a report, and output folders."""
