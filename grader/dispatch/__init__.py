"""Dispatch: which worker grades which notebook, on this machine's processes or a Dask cluster."""
