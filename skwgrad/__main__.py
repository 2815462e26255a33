"""``python -m skwgrad``: the same command line as the ``skwgrad`` script."""

from skwgrad.cli import main

if __name__ == "__main__":
    main(prog_name="skwgrad")
