"""EAGLE draft training by self-distillation (data generation, EAGLE-1 training, export)."""
