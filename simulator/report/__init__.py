"""simulator.report"""
