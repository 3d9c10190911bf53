"""simulator.common"""
