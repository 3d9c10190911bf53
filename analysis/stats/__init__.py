"""analysis.stats"""
