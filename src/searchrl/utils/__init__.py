"""Layer-0 helpers every stage may use: the user-error base class, safe output writing, the
torch thread choice and progress bars. Nothing here imports another searchrl room."""
