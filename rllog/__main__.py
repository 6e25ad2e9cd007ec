from rllog.cli import main

main(prog_name="rllog")
