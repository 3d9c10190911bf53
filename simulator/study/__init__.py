"""simulator.study"""
