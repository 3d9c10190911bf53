"""simulator.engine"""
