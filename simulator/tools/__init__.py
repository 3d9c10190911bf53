"""simulator.tools"""
