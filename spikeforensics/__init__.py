"""spikeforensics: offline forensics for training-loss spikes and NaNs.

The library is the product; the CLI (`spikeforensics.cli`) is a thin layer over
`spikeforensics.api`, which a notebook can call directly:

    from spikeforensics import api
    api.ingest(["run.log", "grads.csv"], run_id="r1")
    diagnosis = api.diagnose("r1")
"""

__version__ = "0.1.0"
