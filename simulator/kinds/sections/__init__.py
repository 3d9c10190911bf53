"""simulator.kinds.sections"""
