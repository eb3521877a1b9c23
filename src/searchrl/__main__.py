"""`python -m searchrl …` runs the `searchrl` command. Guarded: vLLM starts its engine in
spawned processes, which re-import the main module."""

from searchrl.cli import main

if __name__ == "__main__":
    main()
