"""analysis.text"""
