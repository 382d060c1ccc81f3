from spikeforensics.cli import cli

if __name__ == "__main__":
    cli(prog_name="spikeforensics")
