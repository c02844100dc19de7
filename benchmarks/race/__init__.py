"""The parts of ``benchmarks/race_trl.py``: fulmen against TRL's GRPOTrainer on Reasoning Gym."""
