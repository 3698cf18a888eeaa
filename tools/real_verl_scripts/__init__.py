"""Real verl's own example scripts, run through this project's `main_ppo` (harness.py), with the stand-ins
for the files of real verl's tree they read (stand_ins.py) and their arguments (scripts.txt)."""
